//! The writer thread: with a short interval, a communicator's line reaches its `.links` file
//! while the communicator lives (before any finalize), as `gpudirect watch` reads it from a
//! running job. Its own test binary: the profiler settles its configuration once per process.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::{Duration, Instant};

use gpudirect_watch_profiler::abi::{self, EventDescr};
use gpudirect_watch_profiler::ncclProfiler_v5;

#[test]
fn a_line_is_written_every_interval_while_the_communicator_lives() {
    let dir = std::env::temp_dir().join(format!("gdwp-periodic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("GPUDIRECT_WATCH_DIR", &dir);
    std::env::set_var("GPUDIRECT_WATCH_INTERVAL_MS", "100");
    let t = &ncclProfiler_v5.0;
    // SAFETY: the calls NCCL makes, in its order, with descriptors zeroed as NCCL's are.
    unsafe {
        let mut ctx = null_mut();
        let mut mask = 0;
        (t.init)(&mut ctx, 0x77, &mut mask, c"tp".as_ptr(), 2, 2, 0, None);
        let mut d: EventDescr = std::mem::zeroed();
        d.kind = abi::PROFILE_PROXY_OP;
        d.u.proxy_op = abi::ProxyOp {
            pid: 1,
            channel_id: 0,
            peer: 1,
            n_steps: 1,
            chunk_size: 4096,
            is_send: 1,
        };
        let mut op: *mut c_void = null_mut();
        (t.start_event)(ctx, &mut op, &mut d);
        let mut sd: EventDescr = std::mem::zeroed();
        sd.kind = abi::PROFILE_PROXY_STEP;
        sd.parent = op;
        let mut step = null_mut();
        (t.start_event)(ctx, &mut step, &mut sd);
        let mut args = abi::StateArgs { trans_size: 4096 };
        (t.record_event_state)(step, abi::STEP_SEND_WAIT, &mut args);
        (t.stop_event)(step);
        (t.stop_event)(op);

        let start = Instant::now();
        let written = loop {
            let found = std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(Result::ok)
                .find(|e| e.path().extension().is_some_and(|x| x == "links"))
                .and_then(|e| std::fs::read_to_string(e.path()).ok())
                .filter(|text| !text.is_empty());
            if found.is_some() || start.elapsed() > Duration::from_secs(5) {
                break found;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (t.finalize)(ctx);
        std::fs::remove_dir_all(&dir).unwrap();
        let text = written.expect("no line written within 5 s at a 100 ms interval");
        assert!(text.contains("\"comm\":\"0x77\""), "{text}");
        assert!(text.contains("[1,0,\"s\",1,1,4096,"), "{text}");
    }
}
