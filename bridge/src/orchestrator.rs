//! The orchestrator port (DESIGN §13): what hale asks of the system that runs work on
//! the nodes. The policy decides (`core::policy`); an orchestrator only does, and
//! every operation is idempotent — asked twice, it leaves the node as asked once —
//! because a crash between doing and recording repeats the request on restart.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use crate::core::Health;
use crate::core::labels::Notice;
pub use crate::core::policy::Observed;
use crate::core::policy::{Action, Done, PowerOp};

/// An orchestrator's failure: on which node, during which operation, and whether
/// it is worth trying again.
#[derive(Debug, thiserror::Error)]
#[error("{}{detail}", self.context())]
pub struct OrchestratorError {
    pub node: Option<String>,
    /// The operation (`cordon`, `evict`, `inventory`, …).
    pub op: Option<&'static str>,
    pub class: Class,
    pub detail: String,
}

/// Whether a failure may pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Worth trying again (network, conflict, a PodDisruptionBudget saying not yet).
    Transient,
    /// Refused for good (the node is not the orchestrator's to change, a 4xx).
    Refused,
    /// Taken, and never seen done (a BMC that took a power-off and never showed
    /// the machine off): it may have happened, so it is neither tried again nor
    /// taken as not done.
    Unconfirmed,
}

impl OrchestratorError {
    pub fn transient(detail: impl Into<String>) -> Self {
        Self::of(Class::Transient, detail)
    }

    pub fn refused(detail: impl Into<String>) -> Self {
        Self::of(Class::Refused, detail)
    }

    pub fn unconfirmed(detail: impl Into<String>) -> Self {
        Self::of(Class::Unconfirmed, detail)
    }

    fn of(class: Class, detail: impl Into<String>) -> Self {
        OrchestratorError {
            node: None,
            op: None,
            class,
            detail: detail.into(),
        }
    }

    /// The same failure, said of `op` on no one node (an inventory).
    pub fn doing(mut self, op: &'static str) -> Self {
        self.op.get_or_insert(op);
        self
    }

    /// The same failure, said of `node` and `op` (where the caller knows them).
    pub fn during(mut self, node: &str, op: &'static str) -> Self {
        self.node.get_or_insert_with(|| node.to_string());
        self.op.get_or_insert(op);
        self
    }

    pub fn is_retriable(&self) -> bool {
        self.class == Class::Transient
    }

    /// Every value [`OrchestratorError::metric_label`] returns.
    pub const METRIC_LABELS: [&'static str; 3] = ["transient", "refused", "unconfirmed"];

    /// Low-cardinality label for failure counters.
    pub fn metric_label(&self) -> &'static str {
        match self.class {
            Class::Transient => "transient",
            Class::Refused => "refused",
            Class::Unconfirmed => "unconfirmed",
        }
    }

    fn context(&self) -> String {
        match (&self.node, self.op) {
            (Some(n), Some(op)) => format!("node {n}: {op}: "),
            (Some(n), None) => format!("node {n}: "),
            (None, Some(op)) => format!("{op}: "),
            (None, None) => String::new(),
        }
    }
}

pub type Result<T> = std::result::Result<T, OrchestratorError>;
pub type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// A unit of work on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    pub id: String,
    /// What restarts count against: the job or controller that owns the work.
    pub owner: String,
    /// It declared `on-node-fault`: safe to run again from the beginning elsewhere.
    pub restart_on_node_fault: bool,
    /// The orchestrator's unique id of this instance, where it has one (a pod's uid).
    pub uid: Option<String>,
}

/// What a fault eviction does with each workload: move the ones that declared they
/// may restart and have not been moved `max_restarts` times, fail the others.
pub fn plan_eviction<'w>(
    workloads: &'w [Workload],
    moves: &BTreeMap<String, u32>,
    max_restarts: u32,
) -> (Vec<&'w Workload>, Vec<&'w Workload>) {
    workloads.iter().partition(|w| {
        w.restart_on_node_fault && moves.get(&w.owner).copied().unwrap_or(0) < max_restarts
    })
}

/// What the work a fault eviction fails is told: the fault's `message`, then why it
/// was not moved — moved `max_restarts` times already, or not declared safe to move
/// (`hint`, the orchestrator's way to declare it). Actions queued by an older hale
/// carry the hint in their message already.
pub fn eviction_message(
    message: &str,
    failed: &[&Workload],
    max_restarts: u32,
    hint: &str,
) -> String {
    let mut said = message.to_string();
    if failed.iter().any(|w| w.restart_on_node_fault) {
        said.push_str(&if max_restarts == 0 {
            " Work is not moved for node faults here (maxEvictionRestarts 0).".to_string()
        } else {
            format!(
                " Work moved {max_restarts} time(s) already for node faults is not moved again (maxEvictionRestarts)."
            )
        });
    }
    if failed.iter().any(|w| !w.restart_on_node_fault) && !message.contains("on-node-fault") {
        said.push(' ');
        said.push_str(hint);
    }
    said
}

/// What hale says about one node, for the orchestrator to show where its users look.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub id: String,
    pub score: Option<u8>,
    pub health: Health,
    /// hale cannot see this node's alerts (`telemetry_stale`).
    pub stale: bool,
    /// hale holds the node's whole picture: an alert it does not list is not
    /// firing. Without polling, only once every group has had time to be re-sent.
    pub complete: bool,
    /// The node's firing alerts as a Node shows them (Sciuro's way): one per
    /// alertname, the most urgent ([`most_urgent`]).
    pub notices: Vec<Notice>,
    /// hale's raised condition types.
    pub conditions: Vec<crate::core::Name>,
}

/// One notice per alertname: the most urgent (lowest priority), the first of equals.
pub fn most_urgent(notices: impl IntoIterator<Item = Notice>) -> Vec<Notice> {
    let mut by_name: BTreeMap<crate::core::Name, Notice> = BTreeMap::new();
    for n in notices {
        match by_name.get(&n.alertname) {
            Some(kept) if kept.priority <= n.priority => {}
            _ => {
                by_name.insert(n.alertname.clone(), n);
            }
        }
    }
    by_name.into_values().collect()
}

/// The operations every orchestrator implements.
pub trait Orchestrator: Send + Sync {
    /// Whether this replica may act and publish. An orchestrator with a leader
    /// election answers from it; one without has a single replica, always leading.
    fn leads(&self) -> bool {
        true
    }
    /// Changes each time this replica becomes leader, so a new term is noticed
    /// even when the leadership was lost and regained between two looks.
    fn term(&self) -> u64 {
        0
    }
    /// Woken when the inventory may have changed (a watch event), so hale takes it
    /// in without waiting for its next round; `None`: no such signal.
    fn changes(&self) -> Option<std::sync::Arc<tokio::sync::Notify>> {
        None
    }
    /// How work on this orchestrator declares it may be moved rather than failed by
    /// a node fault: said to the work a fault eviction fails.
    fn restart_hint(&self) -> &'static str {
        "Set policy.restart to on-node-fault for work that is safe to run again from the beginning"
    }
    /// The replica that leads, as last seen, for a follower's refusals.
    fn leader(&self) -> Option<String> {
        None
    }
    /// Whether this orchestrator elects a leader of its own (Kubernetes' Lease);
    /// replicas on a shared store elect theirs on it otherwise.
    fn elects(&self) -> bool {
        false
    }
    /// Whether [`Orchestrator::publish`] shows anything: hale builds no reports
    /// for one that does not.
    fn publishes(&self) -> bool {
        true
    }
    /// Show each node's conditions, score and health on the node itself, writing
    /// only what changed.
    fn publish<'a>(&'a self, reports: &'a [Report]) -> Fut<'a, ()>;
    /// The nodes with their status, labels and provisioned flag; `None` when the
    /// orchestrator keeps no inventory and hale's own bookkeeping is the truth.
    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>>;
    /// `by`: `hale` or `operator`, recorded on the node with the reason.
    fn cordon<'a>(&'a self, node: &'a str, by: &'a str, reason: &'a str) -> Fut<'a, ()>;
    fn uncordon<'a>(&'a self, node: &'a str) -> Fut<'a, ()>;
    /// Keep new work off (`on`) or let it back, without cordoning.
    fn gate<'a>(&'a self, node: &'a str, on: bool) -> Fut<'a, ()>;
    /// Passive: cordon only. Active: also stop running work so it runs elsewhere;
    /// returns how many allocations were requeued (`moved`) and how many a
    /// disruption budget kept on the node (`blocked`).
    fn drain<'a>(&'a self, node: &'a str, active: bool) -> Fut<'a, Done>;
    fn workloads<'a>(&'a self, node: &'a str) -> Fut<'a, Vec<Workload>>;
    /// Move `moved` elsewhere, fail `failed` with `message` (the `fault` class's);
    /// returns the ids of those a disruption budget kept on the node (neither
    /// moved nor failed).
    fn evict<'a>(
        &'a self,
        node: &'a str,
        fault: &'a str,
        moved: &'a [&'a Workload],
        failed: &'a [&'a Workload],
        message: &'a str,
    ) -> Fut<'a, Vec<String>>;
    /// Terminate the node; one already gone counts as done.
    fn terminate<'a>(&'a self, node: &'a str) -> Fut<'a, ()>;
    /// Let the work of a node that is powered off run elsewhere (`on`: Kubernetes'
    /// `out-of-service` taint), or stop doing so once it is back.
    fn release_work<'a>(&'a self, node: &'a str, _on: bool) -> Fut<'a, ()> {
        Box::pin(async move {
            Err(
                OrchestratorError::refused("this orchestrator cannot release a fenced node's work")
                    .during(node, "release"),
            )
        })
    }
    /// Whether a fault eviction can fail work; one that cannot (Fuzzball's active
    /// drain requeues every job) moves it all, whatever its restart count.
    fn fails_work(&self) -> bool {
        true
    }
    /// Whether [`Orchestrator::reboot`] can reboot a node without a BMC.
    fn can_reboot(&self) -> bool {
        false
    }
    /// Reboot a node through the orchestrator's own means, for a node without a BMC.
    fn reboot<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Err(OrchestratorError::refused(
                "the node has no BMC (inventory[].bmc, bmc.addressTemplate or, on Kubernetes, the hale.dev/bmc-address annotation) and this orchestrator cannot reboot it",
            )
            .during(node, "reboot"))
        })
    }
    /// The BMC address the orchestrator keeps for the node, if any (Kubernetes: the
    /// `hale.dev/bmc-address` annotation).
    fn bmc_address(&self, _node: &str) -> Option<String> {
        None
    }
    /// At shutdown, after the last action: let another replica lead at once.
    fn release(&self) -> Fut<'_, ()> {
        Box::pin(async { Ok(()) })
    }
}

/// This replica's name in an election: the pod's (the chart sets `POD_NAME`),
/// else host and pid.
pub fn identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "hale".into());
    format!("{host}-{}", std::process::id())
}

/// Run an orchestrator's command (built without a shell) for at most `limit`;
/// its standard output. A failure is (the message, its standard error folded to
/// one line) for the adapter to tell a refusal from a passing failure; a command
/// that cannot start, or runs past `limit`, is an error of its own.
/// Whether `path` is a file this process may run.
pub fn executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why `program` cannot be run, if it cannot: a path that is no executable file,
/// or a bare name found on no directory of `PATH`.
pub fn unrunnable(program: &std::path::Path) -> Option<String> {
    if program.components().count() > 1 {
        return (!executable(program))
            .then(|| format!("{} is missing or not executable", program.display()));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|dir| executable(&dir.join(program)));
    (!found).then(|| {
        format!(
            "`{}` is on no directory of PATH ({}); name its path",
            program.display(),
            path.to_string_lossy()
        )
    })
}

pub async fn run_command(
    mut command: tokio::process::Command,
    shown: &str,
    limit: std::time::Duration,
) -> std::result::Result<String, CommandFailed> {
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    // A program missing or not executable is no refusal of the node: it is
    // tried again (and shown as the pending action's last error) until fixed.
    let child = command.spawn().map_err(|e| {
        CommandFailed::Error(OrchestratorError::transient(format!(
            "cannot run `{shown}`: {e}"
        )))
    })?;
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| {
            CommandFailed::Error(OrchestratorError::transient(format!(
                "`{shown}` did not finish in {}s",
                limit.as_secs()
            )))
        })?
        .map_err(|e| {
            CommandFailed::Error(OrchestratorError::transient(format!("`{shown}`: {e}")))
        })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let words = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    // A command that says why on its standard output (`scontrol show node`'s
    // "Node n9 not found") is quoted from there, its first 500 bytes; what
    // classifies the failure stays its standard error.
    let stderr = words(&output.stderr);
    let said = if stderr.is_empty() {
        let mut out = words(&output.stdout);
        if let Some((cut, _)) = out.char_indices().nth(500) {
            out.truncate(cut);
        }
        out
    } else {
        stderr.clone()
    };
    Err(CommandFailed::Exited {
        message: format!("`{shown}` exited with {}: {said}", output.status),
        stderr,
    })
}

/// How an orchestrator's command failed.
pub enum CommandFailed {
    /// It did not start, or did not finish in time.
    Error(OrchestratorError),
    /// It exited with an error: what to say (its output quoted where its
    /// standard error is empty), and its standard error.
    Exited { message: String, stderr: String },
}

/// Perform one decided action. `moves`: how often each workload owner was moved by
/// node faults so far.
pub async fn perform(
    orchestrator: &dyn Orchestrator,
    node: &str,
    action: &Action,
    moves: &BTreeMap<String, u32>,
) -> Result<Done> {
    let mut done = Done::default();
    let during = |e: OrchestratorError| e.during(node, action.name());
    match action {
        Action::Cordon { by, reason } => orchestrator
            .cordon(node, by.as_str(), reason)
            .await
            .map_err(during)?,
        Action::Uncordon => orchestrator.uncordon(node).await.map_err(during)?,
        Action::Gate { on } => orchestrator.gate(node, *on).await.map_err(during)?,
        Action::Drain { active, .. } => {
            done = orchestrator.drain(node, *active).await.map_err(during)?
        }
        Action::Evict {
            fault_class,
            message,
            max_restarts,
        } => {
            let workloads = orchestrator.workloads(node).await.map_err(during)?;
            let (moved, failed) = if orchestrator.fails_work() {
                plan_eviction(&workloads, moves, *max_restarts)
            } else {
                (workloads.iter().collect(), Vec::new())
            };
            let message =
                eviction_message(message, &failed, *max_restarts, orchestrator.restart_hint());
            let blocked = orchestrator
                .evict(node, fault_class, &moved, &failed, &message)
                .await
                .map_err(during)?;
            let left = |w: &&&Workload| !blocked.contains(&w.id);
            done.moved = moved.iter().filter(left).count() as u32;
            done.failed = failed.iter().filter(left).count() as u32;
            done.blocked = blocked.len() as u32;
            done.moved_owners = moved.iter().filter(left).map(|w| w.owner.clone()).collect();
        }
        Action::Terminate => orchestrator.terminate(node).await.map_err(during)?,
        Action::Power {
            op: PowerOp::Reboot,
            ..
        } => orchestrator.reboot(node).await.map_err(during)?,
        Action::Power { .. } => {
            return Err(during(OrchestratorError::refused(
                "the node has no BMC (inventory[].bmc, bmc.addressTemplate or, on Kubernetes, the hale.dev/bmc-address annotation)",
            )));
        }
        Action::Release { on } => orchestrator.release_work(node, *on).await.map_err(during)?,
    }
    Ok(done)
}

/// `orchestrator.kind: none`: no cluster to change. hale's own bookkeeping of each
/// node's status is the whole truth, so every verb succeeds and no work is moved.
pub struct NoOrchestrator;

impl Orchestrator for NoOrchestrator {
    fn publishes(&self) -> bool {
        false
    }
    fn inventory(&self) -> Fut<'_, Option<Vec<Observed>>> {
        Box::pin(async { Ok(None) })
    }
    fn publish<'a>(&'a self, _: &'a [Report]) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn cordon<'a>(&'a self, _: &'a str, _: &'a str, _: &'a str) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn uncordon<'a>(&'a self, _: &'a str) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn gate<'a>(&'a self, _: &'a str, _: bool) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }
    fn drain<'a>(&'a self, _: &'a str, _: bool) -> Fut<'a, Done> {
        Box::pin(async { Ok(Done::default()) })
    }
    fn workloads<'a>(&'a self, _: &'a str) -> Fut<'a, Vec<Workload>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn evict<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a [&'a Workload],
        _: &'a [&'a Workload],
        _: &'a str,
    ) -> Fut<'a, Vec<String>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn terminate<'a>(&'a self, node: &'a str) -> Fut<'a, ()> {
        Box::pin(async move {
            Err(OrchestratorError::refused(
                "orchestrator none provisions nothing and terminates nothing",
            )
            .during(node, "terminate"))
        })
    }
    /// No scheduler holds the work of a node that is off: nothing to release.
    fn release_work<'a>(&'a self, _: &'a str, _: bool) -> Fut<'a, ()> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: &str, owner: &str, restart: bool) -> Workload {
        Workload {
            id: id.into(),
            owner: owner.into(),
            restart_on_node_fault: restart,
            uid: None,
        }
    }

    #[test]
    fn eviction_moves_only_declared_work_within_its_restarts() {
        let work = [
            w("train-1", "job/train", true),
            w("etl-1", "job/etl", false),
            w("sim-1", "job/sim", true),
        ];
        let moves: BTreeMap<String, u32> = [("job/sim".to_string(), 3)].into();
        let (moved, failed) = plan_eviction(&work, &moves, 3);
        let ids = |v: Vec<&Workload>| v.iter().map(|w| w.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(moved), ["train-1"]);
        assert_eq!(
            ids(failed),
            ["etl-1", "sim-1"],
            "undeclared work fails; work moved 3 times fails"
        );
    }

    /// Work failed for its restarts is told so, not to declare what it declared;
    /// undeclared work is told how to declare it.
    #[test]
    fn failed_work_is_told_why_it_was_not_moved() {
        let hint = "Submit work that is safe to run again from the beginning with --requeue";
        let (over, undeclared) = (w("sim-1", "job/sim", true), w("etl-1", "job/etl", false));
        let said =
            |failed: &[&Workload]| eviction_message("node s3: GPU ECC errors.", failed, 1, hint);
        let over_only = said(&[&over]);
        assert!(over_only.contains("maxEvictionRestarts"), "{over_only}");
        assert!(!over_only.contains("--requeue"), "{over_only}");
        let plain = said(&[&undeclared]);
        assert!(
            plain.ends_with(hint) && !plain.contains("maxEvictionRestarts"),
            "{plain}"
        );
        let both = said(&[&over, &undeclared]);
        assert!(
            both.contains("maxEvictionRestarts") && both.ends_with(hint),
            "{both}"
        );
    }

    #[tokio::test]
    async fn none_does_every_verb_but_terminate() {
        let none = NoOrchestrator;
        let moves = BTreeMap::new();
        for action in [
            Action::Cordon {
                by: crate::core::policy::Actor::Operator,
                reason: "r".into(),
            },
            Action::Uncordon,
            Action::Gate { on: true },
            Action::Drain {
                active: true,
                reason: "r".into(),
            },
        ] {
            assert_eq!(
                perform(&none, "n1", &action, &moves).await.unwrap(),
                Done::default()
            );
        }
        let e = perform(&none, "n1", &Action::Terminate, &moves)
            .await
            .unwrap_err();
        assert!(!e.is_retriable());
    }
}
