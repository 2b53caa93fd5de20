use super::*;
use std::io::Read;
use std::os::fd::AsFd;

fn capacity(fd: impl AsFd) -> usize {
    rustix::pipe::fcntl_getpipe_size(fd).unwrap()
}

fn pipe() -> (File, OwnedFd) {
    let (r, w) = rustix::pipe::pipe().unwrap();
    (File::from(r), w)
}

#[test]
fn small_lines_go_straight_through() {
    let (mut r, w) = pipe();
    let pw = PipeWriter::new(w, 1 << 20, WhenFull::Fail).unwrap();
    pw.write_line(b"one\n").unwrap();
    pw.write_line(b"two\n").unwrap();
    let mut buf = [0u8; 8];
    r.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"one\ntwo\n");
    assert_eq!(pw.queued(), 0);
}

#[test]
fn lines_larger_than_the_pipe_arrive_whole_and_in_order() {
    let (mut r, w) = pipe();
    let pw = PipeWriter::new(w, 64 << 20, WhenFull::Fail).unwrap();
    let big = vec![b'x'; 1 << 20];
    let mut expected = Vec::new();
    for i in 0..3u8 {
        let mut line = big.clone();
        line.push(b'0' + i);
        line.push(b'\n');
        pw.write_line(&line).unwrap();
        pw.write_line(b"small\n").unwrap();
        expected.extend_from_slice(&line);
        expected.extend_from_slice(b"small\n");
    }
    let mut got = vec![0u8; expected.len()];
    r.read_exact(&mut got).unwrap();
    assert!(got == expected);
}

#[test]
fn a_reader_that_never_reads_fills_the_queue_without_blocking() {
    let (_r, w) = pipe();
    let pw = PipeWriter::new(w, 256 << 10, WhenFull::Fail).unwrap();
    let line = vec![b'y'; 100 << 10];
    let mut failures = 0;
    for _ in 0..10 {
        if let Err(WriteError::Full(_)) = pw.write_line(&line) {
            failures += 1;
        }
    }
    assert!(failures > 0, "the queue limit must be enforced");
}

#[test]
fn a_closed_reader_makes_writes_fail() {
    let (r, w) = pipe();
    drop(r);
    let pw = PipeWriter::new(w, 1 << 20, WhenFull::Fail).unwrap();
    assert_eq!(pw.write_line(b"x\n"), Err(WriteError::Closed));
    assert!(pw.is_closed());
}

#[test]
fn close_refuses_later_writes() {
    let (_r, w) = pipe();
    let pw = PipeWriter::new(w, 1 << 20, WhenFull::Fail).unwrap();
    pw.close();
    assert_eq!(pw.write_line(b"x\n"), Err(WriteError::Closed));
}

#[test]
fn parts_arrive_as_one_line_whatever_fits_in_the_pipe() {
    let (mut r, w) = pipe();
    let pw = PipeWriter::new(w, 64 << 20, WhenFull::Fail).unwrap();
    let body = vec![b'z'; 3 << 20];
    let mut expected = Vec::new();
    for i in 0..3u8 {
        let id = [b'0' + i];
        pw.write_parts(&[b"{\"id\":", &id, b",\"r\":\"", &body, b"\"}\n"])
            .unwrap();
        pw.write_parts(&[b"tail", b"\n"]).unwrap();
        for part in [
            &b"{\"id\":"[..],
            &id,
            b",\"r\":\"",
            &body,
            b"\"}\n",
            b"tail\n",
        ] {
            expected.extend_from_slice(part);
        }
    }
    let mut got = vec![0u8; expected.len()];
    r.read_exact(&mut got).unwrap();
    assert!(got == expected);
}

#[test]
fn remainder_skips_across_parts() {
    let parts: [&[u8]; 3] = [b"abc", b"", b"defg"];
    assert_eq!(remainder(&parts, 0), b"abcdefg");
    assert_eq!(remainder(&parts, 2), b"cdefg");
    assert_eq!(remainder(&parts, 3), b"defg");
    assert_eq!(remainder(&parts, 5), b"fg");
    assert_eq!(remainder(&parts, 7), b"");
}

#[test]
fn a_pipe_grows_for_a_large_line_and_not_for_small_ones() {
    let (mut r, w) = pipe();
    let start = capacity(&w);
    assert!(start > 0, "a pipe reports its capacity");
    let pw = PipeWriter::new(w, 64 << 20, WhenFull::Fail).unwrap();
    pw.write_line(b"small\n").unwrap();
    assert_eq!(
        capacity(&r),
        start,
        "a small line leaves the pipe as it was"
    );
    let line = vec![b'q'; start * 3];
    let reader = std::thread::spawn(move || {
        let mut got = vec![0u8; 6 + start * 3];
        r.read_exact(&mut got).unwrap();
        r
    });
    pw.write_line(&line).unwrap();
    let r = reader.join().unwrap();
    let grown = capacity(&r);
    // Growth within the budget succeeds unless the kernel refuses (a lower pipe-max-size).
    if kernel_allows_growth() {
        assert!(grown >= start * 3, "grown to {grown} from {start}");
    }
}

/// Pipe growth needs the kernel's usual ceiling (1 MiB for unprivileged processes).
fn kernel_allows_growth() -> bool {
    std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|m| m.trim().parse::<usize>().ok())
        .is_some_and(|max| max >= MAX_PIPE_BYTES)
}

#[test]
fn growth_stops_at_the_budget_and_a_dropped_pipe_gives_its_share_back() {
    static SMALL: Budget = Budget::new(300 << 10);
    let (r1, _w1) = pipe();
    let (r2, _w2) = pipe();
    let start = capacity(&r1);
    let mut first = PipeSize::within(&r1, &SMALL);
    first.fit(&r1, 256 << 10);
    if !kernel_allows_growth() {
        return;
    }
    assert_eq!(first.bytes(), 256 << 10);
    assert_eq!(SMALL.used(), (256 << 10) - start);
    let mut second = PipeSize::within(&r2, &SMALL);
    second.fit(&r2, 256 << 10);
    assert_eq!(
        second.bytes(),
        start,
        "over budget: the second pipe stays as it was"
    );
    assert_eq!(capacity(&r2), start);
    drop(first);
    assert_eq!(SMALL.used(), 0);
    second.fit(&r2, 256 << 10);
    assert_eq!(
        capacity(&r2),
        256 << 10,
        "the share given back is used again"
    );
}

#[test]
fn owed_lines_are_queued_past_the_limit_and_others_are_not() {
    let (mut r, w) = pipe();
    let pw = PipeWriter::new(w, 256 << 10, WhenFull::Fail).unwrap();
    let line = vec![b'z'; 100 << 10];
    for _ in 0..10 {
        pw.write_owed(&[&line[..], b"\n"]).unwrap();
    }
    assert!(
        pw.queued() > 256 << 10,
        "owed lines wait whatever the limit"
    );
    assert!(matches!(
        pw.write_line(b"other\n"),
        Err(WriteError::Full(_))
    ));
    let mut got = vec![0u8; 10 * ((100 << 10) + 1)];
    r.read_exact(&mut got).unwrap();
    assert!(got
        .chunks(line.len() + 1)
        .all(|c| c[..line.len()] == line[..]));
    assert!(pw.flush(std::time::Instant::now() + Duration::from_secs(5)));
}

#[test]
fn a_reader_that_takes_nothing_for_the_stall_time_is_given_up_once() {
    let (r, w) = pipe();
    let (tx, rx) = std::sync::mpsc::channel();
    let stall = Stall {
        after: Duration::from_millis(300),
        then: Box::new(move |waiting| tx.send(waiting).unwrap()),
    };
    let pw = PipeWriter::with_stall(w, 1 << 20, WhenFull::Fail, stall).unwrap();
    // More than the largest pipe holds, so that some of it waits.
    let line = vec![b's'; 2 * MAX_PIPE_BYTES];
    pw.write_owed(&[&line]).unwrap();
    assert!(pw.queued() > 0);
    let waiting = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(waiting > 0 && waiting <= line.len(), "{waiting}");
    assert!(pw.is_closed());
    assert_eq!(pw.queued(), 0, "what waited is dropped");
    assert!(
        rx.recv_timeout(Duration::from_millis(500)).is_err(),
        "told once"
    );
    drop(r);
}

#[test]
fn a_slow_reader_is_not_a_stalled_one() {
    let (mut r, w) = pipe();
    let stalled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&stalled);
    let stall = Stall {
        after: Duration::from_secs(1),
        then: Box::new(move |_| flag.store(true, Ordering::Relaxed)),
    };
    let pw = PipeWriter::with_stall(w, 64 << 20, WhenFull::Fail, stall).unwrap();
    // Four times what the largest pipe holds, read a little at a time: slow, but never a
    // second without taking anything.
    let line = vec![b'q'; 4 * MAX_PIPE_BYTES];
    pw.write_owed(&[&line]).unwrap();
    let mut got = vec![0u8; line.len()];
    let mut at = 0;
    while at < got.len() {
        std::thread::sleep(Duration::from_millis(50));
        let end = (at + (256 << 10)).min(line.len());
        match r.read(&mut got[at..end]).unwrap() {
            0 => break,
            n => at += n,
        }
    }
    assert!(
        !stalled.load(Ordering::Relaxed),
        "a slow reader was taken for a stalled one"
    );
    assert!(got == line);
    assert!(!pw.is_closed());
}
