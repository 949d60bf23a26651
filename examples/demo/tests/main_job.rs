//! The README's first command (`cargo run -p rocprof-replay-demo`), run as a test so that the
//! main job keeps working: it builds hsa-emu and the `pass_timer` tool, runs the bundled
//! application on hsa-emu with every dispatch replayed 5 times, and the application checks
//! that it saw one execution of each.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Generous: the demo may build hsa-emu, the tool and the kernels first.
const DEADLINE: Duration = Duration::from_secs(600);

#[test]
fn the_demo_replays_every_dispatch_and_the_app_sees_one_execution() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rocprof-replay-demo"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    // Read both pipes on threads so a full pipe never stalls the child.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the demo") {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the demo did not finish within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let all = format!("{out}\n{err}");
    assert!(status.success(), "the demo failed ({status}):\n{all}");
    assert!(all.contains("demo: all results correct"), "{all}");
    let replayed = all
        .lines()
        .filter(|l| l.starts_with("pass_timer:") && l.contains(": replayed, 5 passes"))
        .count();
    assert_eq!(
        replayed, 3,
        "three dispatches, each replayed 5 times:\n{all}"
    );
    assert!(!all.contains("FAIL"), "{all}");
}
