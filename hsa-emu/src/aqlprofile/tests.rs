//! Tests of the AQL profile extension: wave accounting, the table, validation, limits,
//! packets and results. The end-to-end test on a queue is in `queues::tests`.

use super::*;

fn gpu() -> hsa_agent_t {
    topology().gpus().next().expect("a GPU").handle
}

fn ev(block: u32, counter_id: u32) -> hsa_ven_amd_aqlprofile_event_t {
    hsa_ven_amd_aqlprofile_event_t {
        block_name: block,
        block_index: 0,
        counter_id,
    }
}

fn profile(events: &[hsa_ven_amd_aqlprofile_event_t]) -> hsa_ven_amd_aqlprofile_profile_t {
    hsa_ven_amd_aqlprofile_profile_t {
        agent: gpu(),
        type_: HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_PMC,
        events: events.as_ptr(),
        event_count: events.len() as u32,
        parameters: std::ptr::null(),
        parameter_count: 0,
        output_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: std::ptr::null_mut(),
            size: 0,
        },
        command_buffer: hsa_ven_amd_aqlprofile_descriptor_t {
            ptr: std::ptr::null_mut(),
            size: 0,
        },
    }
}

fn last_error() -> String {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { error_string(&mut p) }, HSA_STATUS_SUCCESS);
    // SAFETY: the thread's error string, NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[test]
fn waves_follow_the_groups_items_including_partial_groups() {
    // 64 groups of 256: 4 full waves each.
    let l = Launched::of_dispatch([16384, 1, 1], [256, 1, 1]);
    assert_eq!(
        (l.workgroups, l.waves, l.waves_eq_64, l.waves_lt_64, l.items),
        (64, 256, 256, 0, 16384)
    );
    // 100 items in groups of 64: one full group, one of 36 items.
    let l = Launched::of_dispatch([100, 1, 1], [64, 1, 1]);
    assert_eq!((l.workgroups, l.waves, l.waves_eq_64), (2, 2, 1));
    assert_eq!(
        (l.waves_lt_64, l.waves_lt_48, l.waves_lt_32, l.waves_lt_16),
        (1, 1, 0, 0)
    );
    // 10x10 in 8x8 groups: groups of 64, 16, 16 and 4 items.
    let l = Launched::of_dispatch([10, 10, 1], [8, 8, 1]);
    assert_eq!(
        (l.workgroups, l.waves, l.waves_eq_64, l.items),
        (4, 4, 1, 100)
    );
    assert_eq!(
        (l.waves_lt_64, l.waves_lt_48, l.waves_lt_32, l.waves_lt_16),
        (3, 3, 3, 1)
    );
    // A group of 65 items is two waves, one of a single item.
    let l = Launched::of_dispatch([65, 1, 1], [65, 1, 1]);
    assert_eq!((l.waves, l.waves_eq_64, l.waves_lt_16), (2, 1, 1));
}

#[test]
fn the_table_is_filled_for_major_1_only_and_as_far_as_it_fits() {
    let mut t = hsa_ven_amd_aqlprofile_1_00_pfn_t::default();
    let p = (&raw mut t).cast::<c_void>();
    // SAFETY: `t` is 80 bytes.
    unsafe {
        assert_eq!(
            fill_extension_table(2, 80, p),
            HSA_STATUS_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(fill_extension_table(1, 16, p), HSA_STATUS_SUCCESS);
    }
    assert!(t.hsa_ven_amd_aqlprofile_version_minor.is_some());
    assert!(t.hsa_ven_amd_aqlprofile_error_string.is_none());
    // SAFETY: as above.
    let status = unsafe { fill_extension_table(1, 80, p) };
    assert_eq!(status, HSA_STATUS_SUCCESS);
    assert!(t.hsa_ven_amd_aqlprofile_iterate_data.is_some());
    assert_eq!(TABLE_FUNCTIONS, 10);
    // SAFETY: the emulator's own functions.
    unsafe {
        assert_eq!(
            (t.hsa_ven_amd_aqlprofile_version_major.unwrap())(),
            HSA_AQLPROFILE_VERSION_MAJOR
        );
    }
}

#[test]
fn validate_event_accepts_emulated_counters_only() {
    let check = |agent, e: hsa_ven_amd_aqlprofile_event_t| {
        let mut ok = true;
        // SAFETY: valid pointers.
        let status = unsafe { validate_event(agent, &e, &mut ok) };
        (status, ok)
    };
    for c in COUNTERS {
        assert_eq!(
            check(gpu(), ev(c.block, c.event)),
            (HSA_STATUS_SUCCESS, true)
        );
    }
    // SQ_INSTS_VALU (SQ 26): real, but not something the emulator can know.
    assert_eq!(check(gpu(), ev(SQ, 26)), (HSA_STATUS_SUCCESS, false));
    assert_eq!(
        check(gpu(), ev(HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_TCC, 20)),
        (HSA_STATUS_SUCCESS, false)
    );
    let mut second_instance = ev(SQ, 4);
    second_instance.block_index = 1;
    assert_eq!(check(gpu(), second_instance), (HSA_STATUS_SUCCESS, false));
    let cpu = topology().cpu().handle;
    assert_eq!(
        check(cpu, ev(SQ, 4)),
        (HSA_STATUS_ERROR_INVALID_AGENT, false)
    );
}

#[test]
fn start_refuses_sets_over_a_block_limit_and_unknown_counters() {
    let three_sq = [ev(SQ, 4), ev(SQ, 6), ev(SQ, 14)];
    let mut p = profile(&three_sq);
    let mut packet = hsa_ext_amd_aql_pm4_packet_t::default();
    // SAFETY: live profile and packet.
    assert_eq!(unsafe { start(&mut p, &mut packet) }, HSA_STATUS_ERROR);
    let why = last_error();
    assert!(why.starts_with(OVER_LIMIT), "{why}");
    assert!(why.contains("SQ holds 2"), "{why}");
    // Two SQ, two GRBM, two SPI: fits.
    let six = [
        ev(SQ, 4),
        ev(GRBM, 0),
        ev(SQ, 14),
        ev(GRBM, 2),
        ev(SPI, 49),
        ev(SPI, 52),
    ];
    let mut p = profile(&six);
    // SAFETY: as above.
    assert_eq!(unsafe { start(&mut p, &mut packet) }, HSA_STATUS_SUCCESS);
    assert_eq!(p.command_buffer.size, command_bytes(6));
    assert_eq!(p.output_buffer.size, 48);

    let unknown = [ev(SQ, 26)];
    let mut p = profile(&unknown);
    // SAFETY: as above.
    assert_eq!(unsafe { start(&mut p, &mut packet) }, HSA_STATUS_ERROR);
    assert!(last_error().contains("not a counter hsa-emu emulates"));
    let none: [hsa_ven_amd_aqlprofile_event_t; 0] = [];
    let mut p = profile(&none);
    // SAFETY: as above.
    assert_eq!(unsafe { start(&mut p, &mut packet) }, HSA_STATUS_ERROR);
    let mut p = profile(&six[..1]);
    p.type_ = HSA_VEN_AMD_AQLPROFILE_EVENT_TYPE_TRACE;
    // SAFETY: as above.
    assert_eq!(unsafe { start(&mut p, &mut packet) }, HSA_STATUS_ERROR);
}

#[test]
fn start_writes_the_command_buffer_and_packets_decode() {
    let events = [ev(SQ, 4), ev(GRBM, 0)];
    let mut p = profile(&events);
    let mut cmd = vec![0u8; 4096];
    let mut out = [7u64; 2];
    p.command_buffer = hsa_ven_amd_aqlprofile_descriptor_t {
        ptr: cmd.as_mut_ptr().cast(),
        size: 16,
    };
    p.output_buffer = hsa_ven_amd_aqlprofile_descriptor_t {
        ptr: out.as_mut_ptr().cast(),
        size: 16,
    };
    let mut packet = hsa_ext_amd_aql_pm4_packet_t::default();
    // Too small a command buffer.
    // SAFETY: live profile, buffers and packet.
    let status = unsafe { start(&mut p, &mut packet) };
    assert_eq!(status, HSA_STATUS_ERROR_INVALID_ARGUMENT);
    // A stop before any start is refused.
    p.command_buffer.size = 4096;
    // SAFETY: as above.
    assert_eq!(unsafe { stop(&p, &mut packet) }, HSA_STATUS_ERROR);
    // SAFETY: as above.
    assert_eq!(unsafe { start(&mut p, &mut packet) }, HSA_STATUS_SUCCESS);
    assert_eq!(packet.header, 0, "the header is the caller's");
    let mut bytes = [0u8; 64];
    // SAFETY: the packet is 64 plain bytes.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const packet).cast::<u8>(), bytes.as_mut_ptr(), 64)
    };
    let d = decode(&bytes).expect("ours").expect("valid");
    assert_eq!(
        d,
        Decoded {
            op: Op::Start,
            command: cmd.as_ptr() as u64,
            size: 4096
        }
    );
    let w = read_window(d.command, d.size, 0).expect("a valid window");
    assert_eq!(w.counters, vec![Counter::SqWaves, Counter::GrbmCount]);
    assert_eq!(w.output, out.as_ptr() as u64);
    // SAFETY: as above.
    assert_eq!(unsafe { read(&p, &mut packet) }, HSA_STATUS_SUCCESS);
    // SAFETY: as above.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const packet).cast::<u8>(), bytes.as_mut_ptr(), 64)
    };
    assert_eq!(decode(&bytes).unwrap().unwrap().op, Op::Read);
    let traced = describe(&aql_packet_t { bytes }).unwrap();
    assert_eq!(
        traced,
        format!(
            "AQLPROFILE read command={:#x} size=4096",
            cmd.as_ptr() as u64
        )
    );
    // A packet of another PM4 producer is not ours.
    bytes[4] ^= 0xff;
    assert!(decode(&bytes).is_none());
}

#[test]
fn a_window_counts_dispatches_and_iterate_reports_one_value_per_event() {
    let events = [ev(SQ, 4), ev(GRBM, 0), ev(GRBM, 2), ev(SPI, 49)];
    let mut p = profile(&events);
    let mut cmd = vec![0u8; 256];
    let mut out = [u64::MAX; 4];
    p.command_buffer = hsa_ven_amd_aqlprofile_descriptor_t {
        ptr: cmd.as_mut_ptr().cast(),
        size: 256,
    };
    p.output_buffer = hsa_ven_amd_aqlprofile_descriptor_t {
        ptr: out.as_mut_ptr().cast(),
        size: 32,
    };
    let mut pk = [hsa_ext_amd_aql_pm4_packet_t::default(); 2];
    // SAFETY: live profile, buffers and packets.
    unsafe {
        assert_eq!(start(&mut p, &mut pk[0]), HSA_STATUS_SUCCESS);
        assert_eq!(stop(&p, &mut pk[1]), HSA_STATUS_SUCCESS);
    }
    let as_aql = |k: &hsa_ext_amd_aql_pm4_packet_t| {
        let mut a = aql_packet_t { bytes: [0; 64] };
        // SAFETY: both 64 plain bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (k as *const hsa_ext_amd_aql_pm4_packet_t).cast::<u8>(),
                a.bytes.as_mut_ptr(),
                64,
            )
        };
        a
    };
    let mut q = QueueCounting::default();
    q.dispatch(&Launched::of_dispatch([64, 1, 1], [64, 1, 1]), 0, 10); // before: not counted
    q.packet(&as_aql(&pk[0])).unwrap();
    assert!(q.active());
    assert_eq!(out, [0; 4], "start zeroes the output");
    q.dispatch(
        &Launched::of_dispatch([16384, 1, 1], [256, 1, 1]),
        100,
        1_100,
    );
    q.dispatch(
        &Launched::of_dispatch([100, 1, 1], [64, 1, 1]),
        2_000,
        3_000,
    );
    q.packet(&as_aql(&pk[1])).unwrap();
    assert!(!q.active());
    assert_eq!(out[0], 258, "SQ_WAVES");
    assert_eq!(out[3], 66, "SPI_CSN_NUM_THREADGROUPS");
    assert_eq!(out[2], clocks(2_000), "GRBM_GUI_ACTIVE: 2 us of dispatches");
    assert_eq!(out[2], 3_400);
    assert!(out[1] > 0, "GRBM_COUNT");
    // A second stop has no window.
    assert!(q.packet(&as_aql(&pk[1])).is_err());

    let mut seen = Vec::new();
    // SAFETY: live profile whose output holds 4 values.
    let status = unsafe {
        iterate(&p, |info| {
            seen.push((
                info.sample_id,
                info.data.pmc_data.event,
                info.data.pmc_data.result,
            ));
            HSA_STATUS_SUCCESS
        })
    };
    assert_eq!(status, HSA_STATUS_SUCCESS);
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[0], (0, events[0], 258));
    assert_eq!(seen[3], (0, events[3], 66));
    // INFO_BREAK stops the iteration successfully; another status is returned.
    let mut calls = 0;
    // SAFETY: as above.
    let status = unsafe {
        iterate(&p, |_| {
            calls += 1;
            HSA_STATUS_INFO_BREAK
        })
    };
    assert_eq!((status, calls), (HSA_STATUS_SUCCESS, 1));

    // get_info(PMC_DATA) finds one event's value.
    let mut info = hsa_ven_amd_aqlprofile_info_data_t {
        sample_id: u32::MAX,
        data: hsa_ven_amd_aqlprofile_info_data_u {
            pmc_data: hsa_ven_amd_aqlprofile_pmc_data_t {
                event: events[3],
                result: 0,
            },
        },
    };
    // SAFETY: live profile; `info` is an info record.
    unsafe {
        assert_eq!(
            get_info(
                &p,
                HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA,
                (&raw mut info).cast()
            ),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(info.data.pmc_data.result, 66);
    }
}

#[test]
fn get_info_reports_sizes_limits_and_block_ids() {
    let events = [ev(SQ, 4), ev(GRBM, 0), ev(GRBM, 2)];
    let p = profile(&events);
    let mut v = 0u32;
    let out = (&raw mut v).cast::<c_void>();
    // SAFETY: live profile; 4-byte out values.
    unsafe {
        assert_eq!(
            get_info(&p, HSA_VEN_AMD_AQLPROFILE_INFO_COMMAND_BUFFER_SIZE, out),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(v, 128);
        assert_eq!(
            get_info(&p, HSA_VEN_AMD_AQLPROFILE_INFO_PMC_DATA_SIZE, out),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(v, 24);
        assert_eq!(
            get_info(&p, HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_COUNTERS, out),
            HSA_STATUS_SUCCESS
        );
        assert_eq!(v, 2, "SQ's limit");
        let tcc = [ev(HSA_VEN_AMD_AQLPROFILE_BLOCK_NAME_TCC, 0)];
        assert_eq!(
            get_info(
                &profile(&tcc),
                HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_COUNTERS,
                out
            ),
            HSA_STATUS_ERROR
        );
        let mut q = hsa_ven_amd_aqlprofile_id_query_t {
            name: c"SPI".as_ptr(),
            id: 0,
            instance_count: 0,
        };
        assert_eq!(
            get_info(
                &p,
                HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_ID,
                (&raw mut q).cast()
            ),
            HSA_STATUS_SUCCESS
        );
        assert_eq!((q.id, q.instance_count), (SPI, 1));
        q.name = c"TCC".as_ptr();
        assert_eq!(
            get_info(
                &p,
                HSA_VEN_AMD_AQLPROFILE_INFO_BLOCK_ID,
                (&raw mut q).cast()
            ),
            HSA_STATUS_ERROR
        );
        assert_eq!(
            get_info(&p, HSA_VEN_AMD_AQLPROFILE_INFO_ENABLE_CMD, out),
            HSA_STATUS_ERROR
        );
        assert_eq!(get_info(&p, 99, out), HSA_STATUS_ERROR_INVALID_ARGUMENT);
        let mut blob = [0u8; 192];
        let packet = hsa_ext_amd_aql_pm4_packet_t::default();
        assert_eq!(
            legacy_get_pm4(&packet, blob.as_mut_ptr().cast()),
            HSA_STATUS_ERROR
        );
        assert!(last_error().contains("gfx90a"));
    }
}
