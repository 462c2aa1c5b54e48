//! The wire types of `grant_ledger.v1` and `browser_runtime.v1`, generated from the `.proto`
//! files by protox and tonic-prost-build at build time. The modules mirror the packages, so the
//! runtime's messages can name the authorizer's. Prost types stay at the edges: the domain never
//! sees them.
//!
//! `facts` is the element-facts codec both services use. `limits` is the one table of what every request field may hold, and `checked` the codec that
//! holds every request to it before prost decodes it.
//! `ticket` seals and opens the dispatch tickets the authorizer issues and the runtime checks.

pub mod checked;
pub mod facts;
pub mod ids;
pub mod limits;
pub mod ticket;

#[allow(unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod grant_ledger {
    pub mod v1 {
        tonic::include_proto!("grant_ledger.v1");
    }
}

#[allow(unreachable_pub, clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod browser_runtime {
    pub mod v1 {
        tonic::include_proto!("browser_runtime.v1");
    }
}

pub use browser_runtime::v1 as runtime;
pub use grant_ledger::v1;

/// The compiled descriptors of both packages, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = checked::DESCRIPTORS;

/// Every method path of the service `service` (`grant_ledger.v1.Authorizer`), as
/// `/package.Service/Method`: the closed set a server's metrics label calls by.
pub fn method_paths(service: &str) -> Vec<String> {
    let pool = prost_reflect::DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("the compiled descriptors decode");
    pool.get_service_by_name(service)
        .map(|s| s.methods().map(|m| format!("/{}/{}", s.full_name(), m.name())).collect())
        .unwrap_or_default()
}

/// The code of an Authorize deny for a session whose owner pressed Stop: the worker ends its run
/// (`grant_domain`'s `SESSION_STOPPED`, held to this by a test).
pub const DENY_SESSION_STOPPED: &str = "session_stopped";

/// How long after its `CheckStop` began an act's first input may still start; later, the
/// runtime checks again.
pub const DISPATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

/// How long the authorizer holds its answer to a Stop (and a revoke or a delete) after recording
/// it: twice the window, so that an act whose check read no Stop has started, or never will, by
/// the time the owner sees the answer, with room for the two services' clocks to run at rates a
/// little apart.
pub const STOP_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// On a runtime's error status for a failure the tool contract names (a dialog, a browser
/// restarted clean, a page that moved or broke the read): the contract's code, and `true` or
/// `false` for whether the agent may observe again and go on.
pub const CONTRACT_CODE_HEADER: &str = "contract-code";
pub const RECOVERABLE_HEADER: &str = "recoverable";

/// `AwaitApproval`'s status when the owner stopped the agent in the session: the run ends.
pub const AWAIT_STOPPED: &str = ApprovalStatus::Stopped.code();

/// A card's status as `Approval.status` spells it on the wire. Readers parse it here once and
/// branch on the variant; the authorizer writes the domain's codes, held to these by a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalStatus {
    /// Waiting for the owner.
    Pending,
    Approved,
    Denied,
    /// Not answered in time.
    Expired,
    /// The owner took the live tab over.
    TakenOver,
    /// `AwaitApproval` only: the owner stopped the agent in the session.
    Stopped,
    /// The run that asked ended: nobody waits for the card, and its act will not run.
    Withdrawn,
}

impl ApprovalStatus {
    pub const ALL: [ApprovalStatus; 7] = [
        ApprovalStatus::Pending,
        ApprovalStatus::Approved,
        ApprovalStatus::Denied,
        ApprovalStatus::Expired,
        ApprovalStatus::TakenOver,
        ApprovalStatus::Stopped,
        ApprovalStatus::Withdrawn,
    ];

    pub const fn code(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "PENDING",
            ApprovalStatus::Approved => "APPROVED",
            ApprovalStatus::Denied => "DENIED",
            ApprovalStatus::Expired => "EXPIRED",
            ApprovalStatus::TakenOver => "TAKEN_OVER",
            ApprovalStatus::Stopped => "STOPPED",
            ApprovalStatus::Withdrawn => "WITHDRAWN",
        }
    }

    /// The status `code` names; `None` for a code this build does not know.
    pub fn from_code(code: &str) -> Option<ApprovalStatus> {
        ApprovalStatus::ALL.into_iter().find(|s| s.code() == code)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_service_has_its_method_paths() {
        let authorizer = super::method_paths("grant_ledger.v1.Authorizer");
        assert!(authorizer.contains(&"/grant_ledger.v1.Authorizer/Authorize".to_owned()), "{authorizer:?}");
        let runtime = super::method_paths("browser_runtime.v1.BrowserRuntime");
        assert!(runtime.iter().any(|p| p.ends_with("/Act")), "{runtime:?}");
        assert!(super::method_paths("made.Up").is_empty());
    }
}
