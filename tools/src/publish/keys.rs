//! The owner's publish key pair: Ed25519, made by `bramble keygen`, as two one-line text
//! files. OWNER.PUB (`bramble-publish-public <64 hex digits>`) goes on the card with
//! `bramble image --publish-key`; OWNER.KEY (`bramble-publish-secret <64 hex digits>`, the
//! 32-byte seed, mode 0600) stays with the owner or in the CI's secrets and signs each
//! `bramble publish`.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The first word of OWNER.PUB.
pub const PUBLIC_TAG: &str = "bramble-publish-public";
/// The first word of OWNER.KEY.
pub const SECRET_TAG: &str = "bramble-publish-secret";

/// Arguments of `bramble keygen`.
#[derive(clap::Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the secret key; the public key goes next to it with `.pub` for its
    /// extension (OWNER.KEY and OWNER.PUB).
    #[arg(value_name = "OWNER.KEY")]
    pub output: PathBuf,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// 32 bytes from `text`'s one line `TAG <64 hex digits>`.
pub fn parse_key_line(text: &str, tag: &str) -> Result<[u8; 32], String> {
    let line = text.trim();
    let Some(digits) = line.strip_prefix(tag).map(str::trim) else {
        return Err(format!("it does not start with {tag:?}"));
    };
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("the key is not 64 hexadecimal digits".into());
    }
    let mut key = [0u8; 32];
    for (index, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * index..2 * index + 2], 16)
            .map_err(|_| "bad hexadecimal digit".to_string())?;
    }
    Ok(key)
}

/// Reads and checks OWNER.PUB: a valid Ed25519 public key.
pub fn read_public(path: &Path) -> anyhow::Result<[u8; 32]> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let key = parse_key_line(&text, PUBLIC_TAG).map_err(|problem| {
        anyhow::anyhow!(
            "{} is not a publish key made by `bramble keygen`: {problem}",
            path.display()
        )
    })?;
    ed25519_dalek::VerifyingKey::from_bytes(&key)
        .map_err(|_| anyhow::anyhow!("{} holds no valid Ed25519 public key", path.display()))?;
    Ok(key)
}

/// Reads OWNER.KEY: the signing key.
pub fn read_secret(path: &Path) -> anyhow::Result<ed25519_dalek::SigningKey> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let seed = parse_key_line(&text, SECRET_TAG).map_err(|problem| {
        anyhow::anyhow!(
            "{} is not a secret publish key made by `bramble keygen`: {problem}",
            path.display()
        )
    })?;
    Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
}

/// The public key's path for a secret key's: `.pub` for its extension.
pub fn public_path(secret: &Path) -> PathBuf {
    secret.with_extension("pub")
}

/// Runs `bramble keygen`.
pub fn run(args: KeygenArgs) -> anyhow::Result<()> {
    let public = public_path(&args.output);
    if public == args.output {
        bail!(
            "{} ends in .pub; name the secret key OWNER.KEY",
            args.output.display()
        );
    }
    if !args.force {
        for path in [&args.output, &public] {
            if path.exists() {
                bail!("{} exists; pass --force to replace it", path.display());
            }
        }
    }
    let mut seed = [0u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut seed))
        .context("reading /dev/urandom")?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
        .open(&args.output)
        .and_then(|mut file| writeln!(file, "{SECRET_TAG} {}", hex(&seed)))
        .with_context(|| format!("writing {}", args.output.display()))?;
    fs::write(
        &public,
        format!("{PUBLIC_TAG} {}\n", hex(key.verifying_key().as_bytes())),
    )
    .with_context(|| format!("writing {}", public.display()))?;
    println!(
        "{}: the secret key (keep it, e.g. in your CI's secrets)\n{}: the public key (for \
         `bramble image --publish-key`)",
        args.output.display(),
        public.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_writes_a_pair_that_reads_back_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("owner.key");
        run(KeygenArgs {
            output: secret.clone(),
            force: false,
        })
        .unwrap();
        let signing = read_secret(&secret).unwrap();
        let public = read_public(&public_path(&secret)).unwrap();
        assert_eq!(signing.verifying_key().as_bytes(), &public);
        assert!(
            run(KeygenArgs {
                output: secret.clone(),
                force: false,
            })
            .is_err()
        );
        // The secret file is not a public key, and vice versa.
        assert!(read_public(&secret).is_err());
        assert!(read_secret(&public_path(&secret)).is_err());
    }

    #[test]
    fn key_lines_are_checked() {
        let good = format!("{PUBLIC_TAG} {}\n", "ab".repeat(32));
        assert_eq!(parse_key_line(&good, PUBLIC_TAG), Ok([0xab; 32]));
        for bad in [
            String::new(),
            format!("{PUBLIC_TAG} {}", "ab".repeat(31)),
            format!("{PUBLIC_TAG} {}", "zz".repeat(32)),
            format!("other {}", "ab".repeat(32)),
        ] {
            assert!(parse_key_line(&bad, PUBLIC_TAG).is_err(), "{bad:?}");
        }
    }
}
