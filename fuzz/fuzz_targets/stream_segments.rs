//! Fuzz target: arbitrary bytes as a script against the stream pool serving the HTTP engine:
//! raw frames, handshakes completed with the cookie the pool sent, segments of those
//! connections with any flags, sequence numbers and payloads, time passing, a busy device
//! (`bramble_stream::exercise`). Nothing may panic; every frame the pool sends must
//! parse; connection and session counts stay within the pool; every deadline ends its
//! connection.
#![no_main]

use bramble_http::{Connection, Server, ServerConfig, SiteSource};
use bramble_stream::services::http::HttpService;
use bramble_stream::{
    Cell, Lease, PoolConfig, PoolLimits, PoolMemory, Source, StreamPool, Tcb, exercise,
};
use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn site() -> &'static [u8] {
    static SITE: OnceLock<Vec<u8>> = OnceLock::new();
    SITE.get_or_init(|| {
        let mut writer = SiteImageWriter::new();
        for (path, body) in [
            ("/index.html", b"<p>hello</p>".to_vec()),
            ("/big.bin", (0..20_000u32).map(|i| (i % 251) as u8).collect()),
        ] {
            writer
                .add(FileSpec {
                    path: path.into(),
                    content_type: "text/html".into(),
                    cache_control: "no-cache".into(),
                    last_modified: 0,
                    last_modified_http: http_date(0),
                    identity: VariantSpec {
                        body,
                        etag: "\"e\"".into(),
                    },
                    gzip: None,
                    brotli: None,
                })
                .unwrap();
        }
        writer.finish().unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&shape, script)) = data.split_first() else {
        return;
    };
    let image = SiteImage::new_checked(site()).unwrap();
    let server = core::cell::RefCell::new(Server::new(
        SiteSource::Ready(image),
        ServerConfig::default(),
    ));
    let mut tcbs = vec![Tcb::EMPTY; 4];
    let mut buckets = vec![0u32; 4];
    let mut leases: Vec<_> = (0..2).map(|_| Lease::new(Connection::new())).collect();
    let mut cells: Vec<_> = (0..usize::from(shape % 4)).map(|_| Cell::new()).collect();
    let mut sources = vec![Source::EMPTY; 8];
    let memory = PoolMemory {
        tcbs: &mut tcbs,
        buckets: &mut buckets,
        leases: &mut leases,
        cells: &mut cells,
        sources: &mut sources,
    };
    let config = PoolConfig {
        port: 80,
        limits: PoolLimits::DEFAULT,
        max_per_source: u32::from(shape >> 6),
        seed: [u64::from(shape), 1],
    };
    let mut pool = StreamPool::new(memory, HttpService::new(&server), config);
    exercise::run_script(&mut pool, script);
});
