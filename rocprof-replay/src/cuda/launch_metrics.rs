//! Nsight Compute's `launch__*` metrics, computed by the backend from the launch itself: its
//! configuration (grid, block, dynamic shared memory), the kernel's attributes
//! (`cuFuncGetAttribute`), the device's limits (`cuDeviceGetAttribute`) and the driver's
//! occupancy calculator (`cuOccupancyMaxActiveBlocksPerMultiprocessor`). They are not hardware
//! counters: CUPTI's profiler host API does not list them (on the H200 it never does), and,
//! as in Nsight Compute ("`launch__*` metrics are collected per kernel launch, and do not
//! require an additional replay pass"), they need no counter pass.
//!
//! Every GPU's catalog offers them (block `launch`, [`CounterCatalog::computed_block`]), also
//! when CUPTI's profiler is unavailable ([`catalog_without_counters`]). In a set they are left
//! out of CUPTI's configuration; their values are computed before the window
//! ([`values`]), handed over with the last counter pass's and labelled with pass 0, the
//! application's own execution. A value that cannot be computed (a query fails, the kernel's
//! handle is unknown) is an error for the dispatch's metrics, never a 0.
//!
//! Definitions (Nsight Compute's Profiling Guide, *Launch Metrics*), for a launch of grid
//! `(gx, gy, gz)` blocks of `(bx, by, bz)` threads with `dyn` bytes of dynamic shared memory:
//!
//! | metric | value |
//! |---|---|
//! | `launch__grid_dim_x` / `_y` / `_z` | `gx` / `gy` / `gz` |
//! | `launch__grid_size` | `gx·gy·gz` (blocks) |
//! | `launch__block_dim_x` / `_y` / `_z` | `bx` / `by` / `bz` |
//! | `launch__block_size` | `bx·by·bz` (threads per block) |
//! | `launch__thread_count` | grid size · block size |
//! | `launch__registers_per_thread` | `CU_FUNC_ATTRIBUTE_NUM_REGS`, at least 16 |
//! | `launch__shared_mem_per_block_static` | `CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES` |
//! | `launch__shared_mem_per_block_dynamic` | `dyn` |
//! | `launch__shared_mem_per_block_driver` | `CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK` |
//! | `launch__shared_mem_per_block` | static + dynamic + driver |
//! | `launch__sm_count` | `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT` |
//! | `launch__occupancy_limit_blocks` | `CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR` |
//! | `launch__occupancy_limit_warps` | ⌊warps per SM / ⌈block size / warp size⌉⌋ |
//! | `launch__occupancy_limit_registers` | ⌊4·⌊(registers per SM / 4) / regs per warp⌋ / warps per block⌋ |
//! | `launch__waves_per_multiprocessor` | grid size / (SMs · `cuOccupancyMaxActiveBlocksPerMultiprocessor`) |
//!
//! `launch__registers_per_thread` is what a thread is allocated: on the H200 Nsight Compute
//! reports 16 for kernels the compiler gave 8, and the compiler's count above that (17 for 17),
//! and its register occupancy limit follows the 16; both are the compiler's count raised to 16
//! here.
//! `launch__shared_mem_per_block` includes the driver's reserved shared memory: Nsight
//! Compute's reports show it 1 KiB (the H100/H200 driver reserve) above static + dynamic.
//! `launch__occupancy_limit_registers` allocates registers per warp in units of 256 over 4 SM
//! sub-partitions (NVIDIA's occupancy calculator for compute capability 7.0 and later); a
//! kernel using no registers gets the device's block limit. Not offered:
//! `launch__occupancy_limit_shared_mem` and `launch__shared_mem_config_size` (they depend on
//! the shared memory carveout the driver picks for the launch, which no driver query returns),
//! `launch__registers_per_thread_allocated`, cluster and green-context metrics. Nsight Compute
//! scales `launch__waves_per_multiprocessor` and `launch__sm_count` to a green context's SMs;
//! here they are the device's.

use std::sync::Arc;

use rocprof_replay_sys::cuda::*;

use super::api::*;
use crate::counters::{CounterCatalog, PassScheduler};

/// The catalog block of the launch metrics.
pub(crate) const BLOCK: &str = "launch";

/// Every launch metric the backend computes.
pub(crate) const NAMES: [&str; 19] = [
    "launch__block_dim_x",
    "launch__block_dim_y",
    "launch__block_dim_z",
    "launch__block_size",
    "launch__grid_dim_x",
    "launch__grid_dim_y",
    "launch__grid_dim_z",
    "launch__grid_size",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_warps",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block",
    "launch__shared_mem_per_block_driver",
    "launch__shared_mem_per_block_dynamic",
    "launch__shared_mem_per_block_static",
    "launch__sm_count",
    "launch__thread_count",
    "launch__waves_per_multiprocessor",
];

/// Registers are allocated per warp in units of this many (compute capability 7.0+).
const REGISTER_UNIT: u64 = 256;
/// Fewest registers a thread is allocated (Nsight Compute on the H200: 16 for an 8-register
/// kernel).
const MIN_REGISTERS: u64 = 16;
/// An SM's register file is split among this many sub-partitions (compute capability 7.0+).
const SUB_PARTITIONS: u64 = 4;

/// `catalog` with the launch metrics added (a metric of the same name the vendor listed is
/// replaced: ours needs no pass).
pub(crate) fn offer(mut catalog: CounterCatalog) -> CounterCatalog {
    let first = catalog.counters().count();
    for (i, name) in NAMES.iter().enumerate() {
        catalog = catalog.counter(*name, BLOCK, (first + i) as u32);
    }
    catalog.computed_block(BLOCK)
}

/// The catalog of a GPU without CUPTI's profiler (`why`): the launch metrics only, and a set
/// that names anything else is refused with `why`.
pub(crate) fn catalog_without_counters(agent: String, why: &str) -> CounterCatalog {
    offer(CounterCatalog::new(agent))
        .without_counters(why)
        .scheduled_by(Arc::new(NoCounters(why.to_owned())))
}

/// The scheduler of a catalog without counters: any counted metric is refused.
#[derive(Debug)]
struct NoCounters(String);

impl PassScheduler for NoCounters {
    fn passes(&self, _: &[&str]) -> Result<u32, String> {
        Err(self.0.clone())
    }
}

/// What the launch metrics are computed from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// Blocks per dimension.
    pub(crate) grid: [u32; 3],
    /// Threads per block per dimension.
    pub(crate) block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub(crate) dynamic_shared: u32,
    /// The kernel's `CUfunction` (`None`: a handle the driver cannot be asked about).
    pub(crate) function: Option<usize>,
}

/// The values of `names` (launch metrics) for a launch of `shape` in the context current on
/// this thread, in order; `Err` names the first that cannot be computed and why.
pub(crate) fn values(drv: &Driver, shape: &Shape, names: &[&str]) -> Result<Vec<f64>, String> {
    let mut q = Query {
        drv,
        shape,
        device: None,
    };
    names
        .iter()
        .map(|n| q.value(n).map_err(|why| format!("`{n}`: {why}")))
        .collect()
}

/// One launch's queries.
struct Query<'a> {
    drv: &'a Driver,
    shape: &'a Shape,
    device: Option<CUdevice>,
}

impl Query<'_> {
    fn grid_size(&self) -> u64 {
        self.shape.grid.iter().map(|&d| u64::from(d)).product()
    }

    fn block_size(&self) -> u64 {
        self.shape.block.iter().map(|&d| u64::from(d)).product()
    }

    fn function(&self) -> Result<CUfunction, String> {
        self.shape.function.map(|f| f as CUfunction).ok_or_else(|| {
            "the kernel's handle cannot be queried (not obtained from the driver by the \
             application)"
                .to_owned()
        })
    }

    fn func_attribute(&self, a: CUfunction_attribute, what: &str) -> Result<u64, String> {
        let f = self.function()?;
        let mut v: std::ffi::c_int = 0;
        // SAFETY: a plain out-parameter; `f` is a CUfunction of the current context.
        let r = unsafe { (self.drv.func_get_attribute)(&mut v, a, f) };
        if r != CUDA_SUCCESS {
            return Err(format!(
                "cuFuncGetAttribute({what}) failed: {}",
                error_name(self.drv, r)
            ));
        }
        u64::try_from(v).map_err(|_| format!("cuFuncGetAttribute({what}) returned {v}"))
    }

    fn device(&mut self) -> Result<CUdevice, String> {
        if let Some(d) = self.device {
            return Ok(d);
        }
        let mut d: CUdevice = 0;
        // SAFETY: a plain out-parameter; the launch's context is current on this thread.
        let r = unsafe { (self.drv.ctx_get_device)(&mut d) };
        if r != CUDA_SUCCESS {
            return Err(format!(
                "cuCtxGetDevice failed: {}",
                error_name(self.drv, r)
            ));
        }
        self.device = Some(d);
        Ok(d)
    }

    fn device_attribute(&mut self, a: CUdevice_attribute, what: &str) -> Result<u64, String> {
        let get = self
            .drv
            .device_get_attribute
            .ok_or("this driver has no cuDeviceGetAttribute")?;
        let dev = self.device()?;
        let mut v: std::ffi::c_int = 0;
        // SAFETY: a plain out-parameter and a device ordinal of the driver's.
        let r = unsafe { get(&mut v, a, dev) };
        if r != CUDA_SUCCESS {
            return Err(format!(
                "cuDeviceGetAttribute({what}) failed: {}",
                error_name(self.drv, r)
            ));
        }
        u64::try_from(v).map_err(|_| format!("cuDeviceGetAttribute({what}) returned {v}"))
    }

    /// Registers allocated per thread: the compiler's count, at least [`MIN_REGISTERS`].
    fn registers(&self) -> Result<u64, String> {
        self.func_attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, "CU_FUNC_ATTRIBUTE_NUM_REGS")
            .map(|r| r.max(MIN_REGISTERS))
    }

    fn static_shared(&self) -> Result<u64, String> {
        self.func_attribute(
            CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
            "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES",
        )
    }

    fn driver_shared(&mut self) -> Result<u64, String> {
        self.device_attribute(
            CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
            "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK",
        )
    }

    fn sm_count(&mut self) -> Result<u64, String> {
        self.device_attribute(
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
        )
    }

    fn block_limit(&mut self) -> Result<u64, String> {
        self.device_attribute(
            CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
            "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR",
        )
    }

    fn warp_size(&mut self) -> Result<u64, String> {
        let w = self.device_attribute(
            CU_DEVICE_ATTRIBUTE_WARP_SIZE,
            "CU_DEVICE_ATTRIBUTE_WARP_SIZE",
        )?;
        if w == 0 {
            return Err("the device reports a warp size of 0".into());
        }
        Ok(w)
    }

    /// Warps of one block (a partial warp counts).
    fn warps_per_block(&mut self) -> Result<u64, String> {
        let w = self.warp_size()?;
        match self.block_size().div_ceil(w) {
            0 => Err("the launch has an empty block".into()),
            n => Ok(n),
        }
    }

    fn warp_limit(&mut self) -> Result<u64, String> {
        let threads = self.device_attribute(
            CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
            "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR",
        )?;
        let warps_per_sm = threads / self.warp_size()?;
        Ok(warps_per_sm / self.warps_per_block()?)
    }

    fn register_limit(&mut self) -> Result<u64, String> {
        let regs = self.registers()?;
        if regs == 0 {
            return self.block_limit();
        }
        let per_sm = self.device_attribute(
            CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
            "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR",
        )?;
        let per_warp = (regs * self.warp_size()?).div_ceil(REGISTER_UNIT) * REGISTER_UNIT;
        let warps = (per_sm / SUB_PARTITIONS / per_warp) * SUB_PARTITIONS;
        Ok(warps / self.warps_per_block()?)
    }

    fn waves(&mut self) -> Result<f64, String> {
        let occupancy = self
            .drv
            .occupancy_max_active_blocks
            .ok_or("this driver has no cuOccupancyMaxActiveBlocksPerMultiprocessor")?;
        let f = self.function()?;
        let block = std::ffi::c_int::try_from(self.block_size())
            .map_err(|_| "the block size does not fit an int".to_owned())?;
        let mut blocks: std::ffi::c_int = 0;
        // SAFETY: a plain out-parameter; `f` is a CUfunction of the current context.
        let r = unsafe { occupancy(&mut blocks, f, block, self.shape.dynamic_shared as usize) };
        if r != CUDA_SUCCESS {
            return Err(format!(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor failed: {}",
                error_name(self.drv, r)
            ));
        }
        let resident = u64::try_from(blocks).unwrap_or(0) * self.sm_count()?;
        if resident == 0 {
            return Err(
                "cuOccupancyMaxActiveBlocksPerMultiprocessor says no block of this launch fits \
                 an SM"
                    .into(),
            );
        }
        Ok(self.grid_size() as f64 / resident as f64)
    }

    fn value(&mut self, name: &str) -> Result<f64, String> {
        let [gx, gy, gz] = self.shape.grid.map(f64::from);
        let [bx, by, bz] = self.shape.block.map(f64::from);
        Ok(match name {
            "launch__grid_dim_x" => gx,
            "launch__grid_dim_y" => gy,
            "launch__grid_dim_z" => gz,
            "launch__grid_size" => self.grid_size() as f64,
            "launch__block_dim_x" => bx,
            "launch__block_dim_y" => by,
            "launch__block_dim_z" => bz,
            "launch__block_size" => self.block_size() as f64,
            "launch__thread_count" => self.grid_size() as f64 * self.block_size() as f64,
            "launch__registers_per_thread" => self.registers()? as f64,
            "launch__shared_mem_per_block_static" => self.static_shared()? as f64,
            "launch__shared_mem_per_block_dynamic" => f64::from(self.shape.dynamic_shared),
            "launch__shared_mem_per_block_driver" => self.driver_shared()? as f64,
            "launch__shared_mem_per_block" => {
                (self.static_shared()?
                    + u64::from(self.shape.dynamic_shared)
                    + self.driver_shared()?) as f64
            }
            "launch__sm_count" => self.sm_count()? as f64,
            "launch__occupancy_limit_blocks" => self.block_limit()? as f64,
            "launch__occupancy_limit_warps" => self.warp_limit()? as f64,
            "launch__occupancy_limit_registers" => self.register_limit()? as f64,
            "launch__waves_per_multiprocessor" => self.waves()?,
            _ => return Err("not a launch metric this backend computes".into()),
        })
    }
}
