use super::*;
use std::io::Read;

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
