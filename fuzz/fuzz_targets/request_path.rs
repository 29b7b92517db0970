//! Fuzz target: arbitrary bytes as a script of receive/transmit/clock/close operations on a
//! connection serving a small fixed site (see `bramble_http::exercise::run_script`).
#![no_main]

use std::sync::OnceLock;

use bramble_http::{Server, ServerConfig, SiteSource};
use bramble_site::{FileSpec, SiteImage, SiteImageWriter, VariantSpec, http_date};
use libfuzzer_sys::fuzz_target;

fn file(path: &str, body: Vec<u8>, tag: &str) -> FileSpec {
    FileSpec {
        path: path.into(),
        content_type: "text/html; charset=utf-8".into(),
        cache_control: "no-cache".into(),
        last_modified: 784_111_777,
        last_modified_http: http_date(784_111_777),
        identity: VariantSpec {
            body,
            etag: format!("\"{tag}\""),
        },
        gzip: None,
        brotli: None,
    }
}

fn image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let mut writer = SiteImageWriter::new();
        let mut index = file("/index.html", b"<p>home</p>".repeat(20), "idx");
        index.gzip = Some(VariantSpec {
            body: b"gz".to_vec(),
            etag: "\"idx-gz\"".into(),
        });
        index.brotli = Some(VariantSpec {
            body: b"b".to_vec(),
            etag: "\"idx-br\"".into(),
        });
        writer.add(index).unwrap();
        writer
            .add(file("/dir/index.html", b"dir".to_vec(), "dir"))
            .unwrap();
        writer
            .add(file("/a b.txt", b"spaced".to_vec(), "ab"))
            .unwrap();
        writer
            .add(file("/big.bin", vec![7; 50_000], "big"))
            .unwrap();
        writer.add(file("/empty.txt", Vec::new(), "empty")).unwrap();
        writer
            .add(file("/404.html", b"missing".to_vec(), "nf"))
            .unwrap();
        writer.finish().unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let site = SiteImage::new_checked(image()).unwrap();
    let mut server = Server::new(SiteSource::Ready(site), ServerConfig::default());
    bramble_http::exercise::run_script(&mut server, data);
});
