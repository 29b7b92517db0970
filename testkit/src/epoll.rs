//! The epoll client loop's two shared steps: one bounded wait, and a connect's outcome.
//!
//! The benchmark's judge (bench/src/judge.rs) and the attack suite's hoarder
//! (tests/src/hoard.rs) each drive thousands of non-blocking client sockets from one thread
//! with epoll; both wait the same way and check a finished connect the same way.

use std::net::TcpStream;

use rustix::event::epoll;

/// Clears `events`, then waits up to `millis` ms for events on `epoll` into it. Returns
/// false when a signal interrupted the wait (the caller goes round its loop again) and
/// panics on any other error (a broken epoll descriptor is a bug of the caller's).
pub fn wait(epoll: &impl std::os::fd::AsFd, events: &mut Vec<epoll::Event>, millis: u32) -> bool {
    let timeout = rustix::time::Timespec {
        tv_sec: i64::from(millis / 1000),
        tv_nsec: i64::from(millis % 1000) * 1_000_000,
    };
    events.clear();
    match epoll::wait(
        epoll,
        rustix::buffer::spare_capacity(events),
        Some(&timeout),
    ) {
        Ok(_) => true,
        Err(rustix::io::Errno::INTR) => false,
        Err(error) => panic!("epoll_wait: {error}"),
    }
}

/// The outcome of a non-blocking connect that epoll reported writable or in error: `Ok`
/// once the socket has a peer, else the socket's pending error.
pub fn connect_result(stream: &TcpStream) -> std::io::Result<()> {
    match stream.take_error()? {
        Some(error) => Err(error),
        None => stream.peer_addr().map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_connect_to_a_listener_succeeds_and_a_wait_returns_its_event() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(connect_result(&stream).is_ok());
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
        epoll::add(
            &epoll,
            &stream,
            epoll::EventData::new_u64(7),
            epoll::EventFlags::OUT,
        )
        .unwrap();
        let mut events = Vec::with_capacity(4);
        assert!(wait(&epoll, &mut events, 1000));
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.u64(), 7);
    }

    #[test]
    fn a_wait_with_nothing_ready_ends_empty_after_its_timeout() {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
        let mut events = Vec::with_capacity(4);
        events.push(epoll::Event {
            flags: epoll::EventFlags::IN,
            data: epoll::EventData::new_u64(1),
        });
        assert!(wait(&epoll, &mut events, 1));
        assert!(events.is_empty(), "the previous round's events are cleared");
    }
}
