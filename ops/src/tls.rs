//! A throwaway certificate authority and a server certificate for loopback: what `scripts/run`
//! and the tests use so the authorizer speaks TLS on a developer's machine too. Production
//! brings its own certificates through `AUTHORIZER_TLS_CERT` and `AUTHORIZER_TLS_KEY`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

/// PEM texts of a CA and a server certificate signed by it.
#[derive(Debug, Clone)]
pub struct DevPki {
    pub ca_cert: String,
    pub server_cert: String,
    pub server_key: String,
}

/// The names the server certificate is valid for: loopback only.
pub const SERVER_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl DevPki {
    pub fn generate() -> Result<Self> {
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "grant-ledger throwaway CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let key = KeyPair::generate()?;
        let mut server = CertificateParams::new(SERVER_NAMES.map(str::to_owned).to_vec())?;
        server.distinguished_name.push(DnType::CommonName, "grant-ledger authorizer");
        let cert = server.signed_by(&key, &ca)?;
        Ok(Self { ca_cert: ca.pem(), server_cert: cert.pem(), server_key: key.serialize_pem() })
    }

    /// Where [`DevPki::write`] puts each file.
    pub fn paths(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server-key.pem"))
    }

    /// Writes the three files into `dir` (the key readable by its owner only).
    pub fn write(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca, cert, key) = Self::paths(dir);
        std::fs::write(&ca, &self.ca_cert)?;
        std::fs::write(&cert, &self.server_cert)?;
        std::fs::write(&key, &self.server_key)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
        Ok(())
    }
}
