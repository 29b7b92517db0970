//! A graceful close that never completes (the peer never takes the last bytes or never
//! acknowledges the FIN) is reset at the close deadline, and never leaves the network loop a
//! deadline in the past to spin on.

mod support;

use bramble_http::{ConnectionAction, Server, ServerConfig, SiteSource};
use support::{Client, site_image};

fn server(image: &[u8]) -> Server<'_> {
    let mut config = ServerConfig::default();
    config.limits.first_byte_micros = 1_000;
    config.limits.idle_micros = 3_000;
    config.limits.close_micros = 5_000;
    config.limits.min_send_bytes_per_second = 0;
    Server::new(
        SiteSource::Ready(bramble_site::SiteImage::new_checked(image).unwrap()),
        config,
    )
}

#[test]
fn an_idle_close_that_never_completes_is_reset_at_the_close_deadline() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let responses = client.exchange(
        &mut server,
        b"GET /style.css HTTP/1.1\r\nHost: x\r\n\r\n",
        &[false],
    );
    assert_eq!(responses[0].status, 200);
    client.advance_micros(3_000);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    // The socket is closing but the peer does not let it finish. The loop sleeps until the
    // next deadline: it must lie ahead, not at the idle deadline already passed.
    let next = client.connection.next_deadline().expect("a close deadline");
    assert!(
        next > client.now,
        "next deadline {next:?} is not after now {:?}: the loop would never sleep",
        client.now
    );
    assert_eq!(next, client.now.add_micros(5_000));
    client.advance_micros(4_999);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    client.advance_micros(1);
    assert_eq!(client.action(), ConnectionAction::Abort);
    client.connection.close(&mut server);
    assert_eq!(server.counters().open_connections, 0);
    assert_eq!(server.counters().timeouts, 1);
}

#[test]
fn a_connection_close_that_never_completes_is_reset_at_the_close_deadline() {
    let image = site_image(true);
    let mut server = server(&image);
    let mut client = Client::open(&mut server);
    let responses = client.exchange(
        &mut server,
        b"GET /style.css HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        &[false],
    );
    assert_eq!(responses[0].status, 200);
    assert_eq!(client.action(), ConnectionAction::CloseWhenFlushed);
    // Without a close deadline the socket would hold its pool slot for as long as the peer
    // keeps its window shut.
    assert_eq!(
        client.connection.next_deadline(),
        Some(client.now.add_micros(5_000))
    );
    client.advance_micros(5_000);
    assert_eq!(client.action(), ConnectionAction::Abort);
    client.connection.close(&mut server);
    assert_eq!(server.counters().open_connections, 0);
}
