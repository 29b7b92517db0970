//! SHA-256 and SHA-384 for rustls, from the RustCrypto `sha2` crate.

use alloc::boxed::Box;
use rustls::crypto::hash::{Context, Hash, HashAlgorithm, Output};
use sha2::Digest;

/// A rustls hash over one RustCrypto digest type.
pub struct Sha<D>(core::marker::PhantomData<D>);

/// SHA-256 (the transcript hash of every suite but the AES-256 ones).
pub static SHA256: Sha<sha2::Sha256> = Sha(core::marker::PhantomData);
/// SHA-384 (TLS_AES_256_GCM_SHA384 and its TLS 1.2 sibling).
pub static SHA384: Sha<sha2::Sha384> = Sha(core::marker::PhantomData);

/// The rustls name of a digest type.
pub trait Named {
    /// Which algorithm this is.
    const ALGORITHM: HashAlgorithm;
}

impl Named for sha2::Sha256 {
    const ALGORITHM: HashAlgorithm = HashAlgorithm::SHA256;
}

impl Named for sha2::Sha384 {
    const ALGORITHM: HashAlgorithm = HashAlgorithm::SHA384;
}

impl<D> Hash for Sha<D>
where
    D: Digest + Clone + Send + Sync + Named + 'static,
{
    fn start(&self) -> Box<dyn Context> {
        Box::new(Running(D::new()))
    }

    fn hash(&self, data: &[u8]) -> Output {
        Output::new(&D::digest(data))
    }

    fn output_len(&self) -> usize {
        <D as Digest>::output_size()
    }

    fn algorithm(&self) -> HashAlgorithm {
        D::ALGORITHM
    }
}

struct Running<D>(D);

impl<D> Context for Running<D>
where
    D: Digest + Clone + Send + Sync + 'static,
{
    fn fork_finish(&self) -> Output {
        Output::new(&self.0.clone().finalize())
    }

    fn fork(&self) -> Box<dyn Context> {
        Box::new(Running(self.0.clone()))
    }

    fn finish(self: Box<Self>) -> Output {
        Output::new(&self.0.finalize())
    }

    fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }
}
