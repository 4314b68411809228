//! The reboot flow (DESIGN §8): a node whose alert asks for a reboot
//! (`hale_remediation="reboot"`), or that an operator asks to reboot, waits in one
//! central queue; admitted in priority order, failure domain by failure domain, it
//! is cordoned, described, drained, rebooted through its BMC, seen to go and come
//! back, checked that its alert ended, and put back in service — each step an
//! event, the flow's state written before the step is taken, so a restart resumes
//! it and never reboots a node twice.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{
    Action, Actor, HOUR, PowerOp, count, counted_out, event, policy_verdict, status_name, take_out,
};
use crate::core::outcome::{CoreError, Outcome};
use crate::core::settings::{CONTROL_PLANE_LABELS, CoreSettings, Mode};
use crate::core::{
    BLIND_CONDITIONS, COLLECTOR_FAILED, Condition, EventKind, Fleet, HEARTBEAT_MISSED, Name, Node,
    SmallMap, Status, TELEMETRY_STALE, Time, events::Diagnostics,
};

/// The remediation an alert's `hale_remediation` label names for the reboot flow.
pub const REBOOT: &str = "reboot";

/// An operator's reboot goes ahead of every alert's.
const OPERATOR_PRIORITY: u8 = 0;
/// An alert without a `[Pn]` priority queues after those with one.
const DEFAULT_PRIORITY: u8 = 9;
/// Reboots an alert may have in a day: a fault a reboot does not cure is left for
/// an operator rather than rebooted every time it comes back.
pub const REBOOTS_PER_DAY: usize = 3;
/// The longest a verification waits, once the node is back, before it judges:
/// an alert the reboot did not cure needs time to fire again (its `for`).
const SETTLE_MAX: Duration = Duration::from_secs(300);
const DAY: Duration = Duration::from_secs(86_400);

/// One node's reboot flow, persisted with the node before each step is taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Flow {
    /// The condition that asked for it; `None`: an operator did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// Why, in words (the alert's reason and message, or the operator's).
    pub reason: String,
    pub by: Actor,
    /// Lower first (the `[P6]` convention), then the oldest.
    pub priority: u8,
    pub requested: Time,
    pub step: FlowStep,
    /// When the current step began.
    pub since: Time,
    /// The flow cordoned the node (it was in service before): only then does it
    /// put it back.
    #[serde(default)]
    pub cordoned: bool,
    /// When the reboot was handed to the BMC: set before the request leaves, so a
    /// restart never sends it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Time>,
    /// The node was seen gone (heartbeat missed, or not ready) after the reboot.
    #[serde(default)]
    pub away: bool,
    /// The BMC read the machine off, then on: the reboot happened, whether or not
    /// hale saw the node go (it may have been down itself meanwhile).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub confirmed: bool,
    /// When it was admitted (it waited in the queue from `requested`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<Time>,
    /// Skip the graceful shutdown.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlowStep {
    Queued,
    Cordon,
    Drain,
    Reboot,
    Return,
    Verify,
    Uncordon,
}

impl FlowStep {
    pub fn as_str(self) -> &'static str {
        match self {
            FlowStep::Queued => "queued",
            FlowStep::Cordon => "cordon",
            FlowStep::Drain => "drain",
            FlowStep::Reboot => "reboot",
            FlowStep::Return => "return",
            FlowStep::Verify => "verify",
            FlowStep::Uncordon => "uncordon",
        }
    }
}

/// What the service knows of the world beyond the fleet, for admission.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// A `remediation.blockingAlerts` alert that fires, or why they cannot be read
    /// (which blocks as well).
    pub blocking: Option<String>,
    /// By node type name: a blocking alert of that type that fires.
    pub blocked_types: BTreeMap<String, String>,
    /// The nodes whose BMC the service looked for (`None`: not looked for, every
    /// node taken to have one); only those may be admitted or fenced.
    pub bmc_checked: Option<BTreeSet<String>>,
    /// Of those, the ones without a BMC hale can reach, and what is missing.
    pub no_bmc: BTreeMap<String, String>,
    /// The orchestrator can reboot a node without a BMC.
    pub can_reboot: bool,
}

impl Facts {
    /// Why hale cannot reach the node's BMC, if it cannot (or has not looked yet).
    pub fn missing_bmc(&self, id: &str) -> Option<String> {
        if let Some(checked) = &self.bmc_checked
            && !checked.contains(id)
        {
            return Some("its BMC has not been looked up yet".into());
        }
        self.no_bmc.get(id).cloned()
    }
}

/// The flow's queue as `hale remediation list` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remediations {
    /// Waiting for admission, in admission order, each with what holds it.
    pub queued: Vec<Entry>,
    pub in_flight: Vec<Entry>,
    /// What holds every admission back (stale source, blocking alert, window,
    /// failure budget); empty when nothing does.
    pub blocked: Vec<String>,
    pub failures_last_hour: u32,
    /// Fences under way.
    pub fencing: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub node: String,
    pub action: String,
    pub step: String,
    pub since: Time,
    pub priority: u8,
    pub trigger: String,
    pub domain: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// The raised, unsuppressed condition asking for a reboot, most urgent first: its
/// type and the condition. Borrowed: a tick asks this of every node.
fn reboot_trigger(conditions: &SmallMap<Name, Condition>) -> Option<(&str, &Condition)> {
    conditions
        .iter()
        .filter(|(_, c)| c.remediation.as_deref() == Some(REBOOT) && !c.suppressed())
        .map(|(ctype, c)| (ctype.as_str(), c))
        .min_by_key(|(ctype, c)| (c.priority.unwrap_or(DEFAULT_PRIORITY), *ctype))
}

impl Flow {
    /// A flow waiting for its admission, asked for at `now`.
    fn queued(
        trigger: Option<String>,
        reason: String,
        by: Actor,
        priority: u8,
        now: Time,
        force: bool,
    ) -> Flow {
        Flow {
            trigger,
            reason,
            by,
            priority,
            requested: now,
            step: FlowStep::Queued,
            since: now,
            cordoned: false,
            sent: None,
            away: false,
            confirmed: false,
            started: None,
            force,
        }
    }
}

/// Whether a condition of the node asks for a reboot.
pub(crate) fn asks_reboot(node: &Node) -> bool {
    reboot_trigger(&node.conditions).is_some()
}

/// Whether remediation has anything to look at on the node: a condition asking
/// for a reboot, a flow, or a recommendation to take back.
fn watched(node: &Node) -> bool {
    node.policy.flow.is_some() || node.policy.recommended_reboot.is_some() || asks_reboot(node)
}

/// Why a condition asks for a reboot: its reason, and its message's first line.
fn reboot_why(c: &Condition) -> String {
    match c.message.lines().next().filter(|l| !l.is_empty()) {
        Some(first) => format!("{}: {first}", c.reason),
        None => c.reason.to_string(),
    }
}

/// The flows a pass over the fleet found, for the steps after it.
#[derive(Default)]
struct Flows {
    /// Admitted flows, by node id.
    under_way: Vec<String>,
    /// Queued flows: (an alert's, priority, requested, node id) — an operator's
    /// first, whatever priority an alert claims.
    queued: Vec<(bool, u8, Time, String)>,
}

impl Flows {
    fn note(&mut self, node: &Node) {
        if let Some(f) = &node.policy.flow {
            if f.step == FlowStep::Queued {
                self.queued.push((
                    f.by != Actor::Operator,
                    f.priority,
                    f.requested,
                    node.id.clone(),
                ));
            } else {
                self.under_way.push(node.id.clone());
            }
        }
    }

    /// The queued flows' nodes in admission order: an operator's, then priority,
    /// then age.
    fn queue(mut queued: Vec<(bool, u8, Time, String)>) -> Vec<String> {
        queued.sort();
        queued.into_iter().map(|(_, _, _, id)| id).collect()
    }
}

/// [`Fleet::enqueue`] for one node: string-free unless it records something, as
/// nearly every node of a tick records nothing.
fn enqueue_node(
    cfg: &CoreSettings,
    now: Time,
    retry: chrono::TimeDelta,
    node: &mut Node,
    out: &mut Outcome,
) {
    // What alerts say of a name hale just replaced is the old machine's.
    if super::just_replaced(node, now) {
        return;
    }
    let Some((ctype, c)) = reboot_trigger(&node.conditions) else {
        let withdrawn = node
            .policy
            .flow
            .as_ref()
            .is_some_and(|f| f.step == FlowStep::Queued && f.trigger.is_some());
        if withdrawn {
            // The alert ended before the flow's turn came.
            node.policy.flow = None;
            out.dirty.insert(node.id.clone());
        }
        if node.policy.recommended_reboot.take().is_some() {
            out.dirty.insert(node.id.clone());
        }
        return;
    };
    let settings = cfg.settings_for(&node.labels);
    if let Some(f) = node.policy.flow.as_mut() {
        let queued_by_alerts = f.step == FlowStep::Queued && f.by == Actor::Hale;
        // A pool switched to observe stops what its alerts queued.
        if queued_by_alerts && settings.mode == Mode::Observe {
            node.policy.flow = None;
            out.dirty.insert(node.id.clone());
        } else {
            // Waiting its turn, it is ordered by the most urgent alert asking now.
            let priority = c.priority.unwrap_or(DEFAULT_PRIORITY);
            if queued_by_alerts && (f.priority, f.trigger.as_deref()) != (priority, Some(ctype)) {
                f.priority = priority;
                f.trigger = Some(ctype.to_string());
                f.reason = reboot_why(c);
                out.dirty.insert(node.id.clone());
            }
            return;
        }
    }
    let observe = settings.mode == Mode::Observe;
    // A flow that failed lately holds the next for `retryAfter`; observe says what
    // would really happen, so it recommends none meanwhile either.
    if node
        .policy
        .flow_failed_at
        .is_some_and(|at| now - at < retry)
    {
        return;
    }
    if !observe {
        let day_ago = now - chrono::TimeDelta::from_std(DAY).expect("a day");
        let before = node.policy.reboots.len();
        node.policy.reboots.retain(|t| *t > day_ago);
        if node.policy.reboots.len() != before {
            out.dirty.insert(node.id.clone());
        }
    }
    // Out of service in someone else's hands: what they do is theirs.
    let not_ours = not_ours(node);
    // Recommended (observe) or refused: said once per episode, not queued.
    let guardrail = if observe {
        Some(None)
    } else if node.policy.reboots.len() >= REBOOTS_PER_DAY {
        Some(Some("remediation.rebootsPerDay"))
    } else if let Some((guardrail, _)) = &not_ours {
        Some(Some(*guardrail))
    } else {
        None
    };
    if let Some(guardrail) = guardrail {
        if node.policy.recommended_reboot.as_deref() == Some(ctype) {
            return;
        }
        let message = match guardrail {
            None => format!(
                "would reboot: {} (observe mode changes nothing)",
                reboot_why(c)
            ),
            Some("remediation.rebootsPerDay") => format!(
                "not rebooted: {} reboots for its alerts in the last day did not cure it; left for an operator",
                node.policy.reboots.len()
            ),
            Some(_) => not_ours.map(|(_, why)| why).unwrap_or_default(),
        };
        node.policy.recommended_reboot = Some(ctype.to_string());
        out.events.push(policy_verdict(
            node, settings, now, REBOOT, guardrail, message,
        ));
        out.dirty.insert(node.id.clone());
        return;
    }
    node.policy.flow = Some(Flow::queued(
        Some(ctype.to_string()),
        reboot_why(c),
        Actor::Hale,
        c.priority.unwrap_or(DEFAULT_PRIORITY),
        now,
        false,
    ));
    out.dirty.insert(node.id.clone());
}

/// Why a reboot hale's policy asks for is not its to start on `node`: a cordon
/// a reboot flow this store has no record of left (another replica's, another
/// hale's on the same cluster, or a lost store: what it did is unknown), or an
/// operator's (a repair, their own maintenance). The guardrail and the verdict.
fn not_ours(node: &Node) -> Option<(&'static str, String)> {
    let cordon = node.policy.cordon.as_ref()?;
    if node.policy.flow_failed_at.is_none() && flow_cordon(Some(cordon)) {
        return Some((
            "remediation.unknownFlow",
            "not rebooted: a reboot flow this hale has no record of left it cordoned (another replica's or another hale's, or a lost store); an operator decides".into(),
        ));
    }
    (cordon.by == Actor::Operator).then(|| {
        (
            "remediation.operatorCordon",
            format!(
                "not rebooted: an operator took it out of service ({}); theirs to reboot (hale node reboot {})",
                cordon.reason, node.id
            ),
        )
    })
}

/// The start of every cordon reason a reboot flow writes.
pub(super) const CORDON_REASON: &str = "hale reboot: ";

/// Whether an action's reason is a reboot flow's.
pub(super) fn flows(reason: &str) -> bool {
    reason.starts_with(CORDON_REASON)
}

/// Whether the node's cordon is one a reboot flow made (hale's, its reason the
/// flow's).
fn flow_cordon(cordon: Option<&super::Cordon>) -> bool {
    cordon.is_some_and(|c| c.by == Actor::Hale && flows(&c.reason))
}

/// Whether hale cannot see the node now: silent, or not ready.
fn gone(node: &Node) -> bool {
    node.conditions.contains_key(HEARTBEAT_MISSED)
        || node.policy.not_ready
        || matches!(node.status, Status::NotReady | Status::Offline)
}

fn is_control_plane(node: &Node) -> bool {
    CONTROL_PLANE_LABELS
        .iter()
        .any(|l| node.labels.contains_key(*l))
}

/// The failure domain a node belongs to: its label's value, else the node alone.
fn domain(cfg: &CoreSettings, node: &Node) -> String {
    cfg.remediation
        .failure_domain_label
        .as_ref()
        .and_then(|l| node.labels.get(l))
        .map_or_else(|| format!("node/{}", node.id), |d| d.clone())
}

fn elapsed(now: Time, since: Time) -> Duration {
    (now - since).to_std().unwrap_or_default()
}

/// A step event of the reboot flow.
fn step_event(id: &str, now: Time, step: FlowStep, message: String) -> crate::core::Event {
    event(
        id,
        now,
        EventKind::RemediationStep {
            action: REBOOT.into(),
            step: step.as_str().into(),
            diagnostics: None,
        },
        message,
    )
}

impl Fleet {
    /// `hale node reboot`: queue the node for the reboot flow, ahead of every
    /// alert's, in any policy mode (an operator asked). A flow already under way is
    /// a conflict; one an alert queued is taken over.
    pub fn request_reboot(
        &mut self,
        now: Time,
        id: &str,
        reason: &str,
        force: bool,
    ) -> Result<Outcome, CoreError> {
        let node = self
            .nodes
            .get_mut(id)
            .ok_or_else(|| CoreError::UnknownNode(id.into()))?;
        if let Some(f) = &node.policy.fence {
            return Err(CoreError::Busy {
                node: id.into(),
                doing: format!("a fence is at step {}", f.step.as_str()),
            });
        }
        if let Some(f) = &node.policy.flow
            && (f.step != FlowStep::Queued || f.by == Actor::Operator)
        {
            return Err(CoreError::Busy {
                node: id.into(),
                doing: format!("a reboot flow is at step {}", f.step.as_str()),
            });
        }
        if let Some(watching) = self.remediation_watch.as_mut() {
            watching.insert(id.into());
        }
        node.policy.flow = Some(Flow::queued(
            None,
            reason.into(),
            Actor::Operator,
            OPERATOR_PRIORITY,
            now,
            force,
        ));
        let mut out = Outcome::default();
        out.dirty.insert(id.into());
        // A manual action is an event when asked for, not only once admitted: what
        // holds it may hold it for long (`hale remediation list` says what).
        out.events.push(step_event(
            id,
            now,
            FlowStep::Queued,
            format!("reboot queued by an operator: {reason}"),
        ));
        Ok(out)
    }

    /// `hale node reboot` on a node whose pool observes: recorded as recommended,
    /// nothing done (DESIGN §8).
    pub fn recommend_reboot(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        reason: &str,
    ) -> Result<Outcome, CoreError> {
        let node = self
            .nodes
            .get(id)
            .ok_or_else(|| CoreError::UnknownNode(id.into()))?;
        let settings = cfg.settings_for(&node.labels);
        let mut out = Outcome::default();
        out.events.push(policy_verdict(
            node,
            settings,
            now,
            REBOOT,
            None,
            format!("would reboot: an operator asked ({reason}); observe mode changes nothing"),
        ));
        Ok(out)
    }

    /// The reboot of node `id` is about to be handed to its BMC: recorded first, so
    /// a process that stops before hearing back does not send it again.
    pub fn reboot_sending(&mut self, now: Time, id: &str) -> Outcome {
        let mut out = Outcome::default();
        // One this process recorded before and never sent (the write did not
        // land) is recorded again; one an earlier process sent is not.
        let started = self.trust.watching_since;
        if let Some(flow) = self.nodes.get_mut(id).and_then(|n| n.policy.flow.as_mut())
            && flow.step == FlowStep::Reboot
            && flow.sent.is_none_or(|t| t >= started)
        {
            flow.sent = Some(now);
            out.dirty.insert(id.into());
        }
        out
    }

    /// One pass of the reboot flow and fencing: queue what alerts ask for, move
    /// each flow on as time and the node's state allow, admit what the rules let
    /// in. Run every tick.
    pub fn remediate(&mut self, cfg: &CoreSettings, now: Time, facts: &Facts) -> Outcome {
        let mut out = Outcome::default();
        let hour_ago = now - chrono::TimeDelta::from_std(HOUR).expect("an hour");
        let before = self.ledger.flow_failures.len();
        self.ledger.flow_failures.retain(|t| *t > hour_ago);
        out.ledger |= self.ledger.flow_failures.len() != before;
        let flows = self.enqueue(cfg, now, &mut out);
        self.advance(cfg, now, facts, flows.under_way, &mut out);
        self.admit(cfg, now, facts, Flows::queue(flows.queued), &mut out);
        self.fence(cfg, now, facts, &mut out);
        out
    }

    /// Queue a flow for every node an alert asks to reboot; in `observe`, record the
    /// recommendation once per episode instead. It looks only at the nodes
    /// [`Fleet::remediation_watch`] holds — at 100,000 nodes a pass over every node's
    /// conditions held the fleet for tens of milliseconds every second — and notes
    /// the flows it leaves for the steps after it.
    fn enqueue(&mut self, cfg: &CoreSettings, now: Time, out: &mut Outcome) -> Flows {
        let retry = chrono::TimeDelta::from_std(cfg.remediation.retry_after).expect("bounded");
        let Fleet {
            nodes,
            remediation_watch,
            ..
        } = self;
        let watching = remediation_watch.get_or_insert_with(|| {
            nodes
                .values()
                .filter(|n| watched(n))
                .map(|n| n.id.clone())
                .collect()
        });
        let mut flows = Flows::default();
        // In id order, as a pass over the fleet would.
        watching.retain(|id| {
            let Some(node) = nodes.get_mut(id) else {
                return false;
            };
            enqueue_node(cfg, now, retry, node, out);
            flows.note(node);
            watched(node)
        });
        flows
    }

    /// Move each admitted flow on where time or the node's state decides: a reboot
    /// a stopped process sent, the node's departure and return, the verification,
    /// and every step's timeout.
    fn advance(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        facts: &Facts,
        ids: Vec<String>,
        out: &mut Outcome,
    ) {
        for id in ids {
            // What would hold a reboot back now, checked again just before it is
            // sent (a blocking alert may have begun to fire during the drain).
            let node = &self.nodes[&id];
            let held = if self.trust.stale || !self.trust.source_up {
                Some("hale's alert source is stale or down".to_string())
            } else if let Some(b) = &facts.blocking {
                Some(b.clone())
            } else {
                cfg.remediation
                    .node_type(&node.labels)
                    .and_then(|t| facts.blocked_types.get(&t.name))
                    .map(|a| format!("{a} fires"))
            };
            // Without a BMC a reboot is the orchestrator's own, where it has one; the
            // service finds which when it performs it (`None`: not looked for yet).
            let via_bmc = if facts.no_bmc.contains_key(&id) {
                Some(false)
            } else if facts.bmc_checked.as_ref().is_some_and(|c| c.contains(&id)) {
                Some(true)
            } else {
                None
            };
            match self.next_move(cfg, now, &id, held, via_bmc, out) {
                Move::Stay => {}
                Move::Fail(step, why) => self.fail_flow(cfg, now, &id, step, &why, out),
                Move::PutBack => self.put_back_after_reboot(cfg, now, &id, out),
                Move::Drain => self.describe_and_drain(now, &id, out),
                Move::Succeed => self.flow_succeeded(now, &id, out),
            }
        }
    }

    /// What time and the node's state decide for one admitted flow.
    fn next_move(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        held: Option<String>,
        via_bmc: Option<bool>,
        out: &mut Outcome,
    ) -> Move {
        let r = &cfg.remediation;
        let started = self.trust.watching_since;
        let trusted_at = self.trust.last_trusted;
        // Blind, hale acts on nothing: a flow under way neither drains nor puts the
        // node back until it sees again (its timeouts run on).
        let blind = self.trust.stale || !self.trust.source_up;
        let node = self.nodes.get_mut(id).expect("listed by the caller");
        let pending =
            |node: &Node, f: fn(&Action) -> bool| node.policy.pending.iter().any(|p| f(&p.action));
        let away = gone(node);
        let cleared = |trigger: &Option<String>| match trigger {
            None => true,
            Some(t) => node
                .conditions
                .get(t.as_str())
                .is_none_or(|c| c.suppressed()),
        };
        let flow = node.policy.flow.as_ref().expect("listed by the caller");
        let took = elapsed(now, flow.since);
        match flow.step {
            FlowStep::Queued => Move::Stay,
            // Done, though the orchestrator's word came before hale's record of it
            // (a restart, another replica's watch): the step is over all the same.
            FlowStep::Uncordon if !pending(node, |a| matches!(a, Action::Uncordon)) => {
                Move::Succeed
            }
            FlowStep::Uncordon => Move::Stay,
            FlowStep::Cordon
                if !blind
                    && !pending(node, |a| matches!(a, Action::Cordon { .. }))
                    && node.policy.cordon.is_some() =>
            {
                Move::Drain
            }
            // A drain held while hale is blind is hale's wait, not the node's: no
            // timeout until it sees again.
            FlowStep::Cordon | FlowStep::Drain
                if took > r.drain_timeout && !(blind && flow.step == FlowStep::Cordon) =>
            {
                Move::Fail(
                    flow.step,
                    format!(
                        "{} did not finish within remediation.drainTimeout ({}s)",
                        flow.step.as_str(),
                        r.drain_timeout.as_secs()
                    ),
                )
            }
            FlowStep::Cordon | FlowStep::Drain => Move::Stay,
            FlowStep::Reboot
                if flow.sent.is_none()
                    && !pending(node, |a| {
                        matches!(
                            a,
                            Action::Power {
                                op: PowerOp::Reboot,
                                ..
                            }
                        )
                    }) =>
            {
                match held {
                    Some(why) if took > r.drain_timeout => Move::Fail(
                        FlowStep::Reboot,
                        format!(
                            "held before the reboot for remediation.drainTimeout ({}s): {why}",
                            r.drain_timeout.as_secs()
                        ),
                    ),
                    Some(_) => Move::Stay,
                    None => {
                        let force = flow.force;
                        node.policy.push(Action::Power {
                            op: PowerOp::Reboot,
                            force,
                        });
                        out.dirty.insert(id.into());
                        out.events.push(step_event(
                            id,
                            now,
                            FlowStep::Reboot,
                            match (via_bmc, force) {
                                (Some(true), true) => "rebooting through the BMC (forced)".into(),
                                (Some(true), false) => "rebooting through the BMC: graceful shutdown, forced after bmc.gracefulTimeout".into(),
                                (Some(false), _) => "rebooting through the orchestrator (no BMC is configured for the node)".into(),
                                (None, _) => "rebooting through the node's BMC, or the orchestrator's own reboot where it has none".into(),
                            },
                        ));
                        Move::Stay
                    }
                }
            }
            FlowStep::Reboot => {
                // Sent by a process that stopped before it heard back: the machine
                // may well be rebooting; never send it again.
                let Some(sent) = flow.sent.filter(|t| *t < started) else {
                    return Move::Stay;
                };
                let flow = node.policy.flow.as_mut().expect("listed by the caller");
                flow.step = FlowStep::Return;
                flow.since = sent;
                flow.away |= away;
                node.policy.pending.retain(|p| {
                    !matches!(
                        p.action,
                        Action::Power {
                            op: PowerOp::Reboot,
                            ..
                        }
                    )
                });
                // Stopped between the off and the on, the machine would stay off: an
                // on is no second reboot, and changes nothing on a machine that is on.
                node.policy.push(Action::Power {
                    op: PowerOp::On,
                    force: false,
                });
                out.dirty.insert(id.into());
                out.events.push(step_event(
                    id,
                    now,
                    FlowStep::Return,
                    "the reboot was sent before hale restarted: not sending it again; powering on if it is off, then waiting for the node to return".into(),
                ));
                Move::Stay
            }
            FlowStep::Return => {
                let was_away = flow.away;
                // A reboot the BMC confirmed needs no sighting of the node gone (a
                // hale down meanwhile saw none): back is reporting for a whole
                // heartbeat window since the power-on, which a node still booting
                // would have been missed in.
                let settled = flow.confirmed
                    && node.heartbeat.as_ref().is_some_and(|hb| {
                        let window = cfg.settings_for(&node.labels).miss_after(hb.interval);
                        chrono::TimeDelta::from_std(window).is_ok_and(|w| hb.last >= flow.since + w)
                    });
                let flow = node.policy.flow.as_mut().expect("listed by the caller");
                if away && !was_away {
                    flow.away = true;
                    out.dirty.insert(id.into());
                } else if !away && (was_away || settled) {
                    flow.step = FlowStep::Verify;
                    flow.since = now;
                    out.dirty.insert(id.into());
                    out.events.push(step_event(
                        id,
                        now,
                        FlowStep::Verify,
                        "back after the reboot: checking that its alert ended".into(),
                    ));
                    return Move::Stay;
                }
                if took <= r.return_timeout {
                    return Move::Stay;
                }
                let limit = r.return_timeout.as_secs();
                Move::Fail(
                    FlowStep::Return,
                    if flow.away {
                        format!(
                            "the node went away and did not return within remediation.returnTimeout ({limit}s)"
                        )
                    } else {
                        format!(
                            "hale never saw the node go away (heartbeat missed or not ready) within remediation.returnTimeout ({limit}s): the reboot is not confirmed"
                        )
                    },
                )
            }
            FlowStep::Verify => {
                // Judged only once the node has been back a while and hale has read
                // Alertmanager since: an alert the reboot did not cure must have had
                // the time to fire again.
                let settle = (r.verify_timeout / 2).min(SETTLE_MAX);
                let judged = took >= settle
                    && trusted_at.is_some_and(|t| {
                        t >= flow.since + chrono::TimeDelta::from_std(settle).expect("bounded")
                    });
                // Blind, nothing is judged, and the timeout waits for hale to see
                // again: its first trusted answer decides.
                if blind {
                    Move::Stay
                } else if judged && cleared(&flow.trigger) && !away {
                    Move::PutBack
                } else if took > r.verify_timeout {
                    Move::Fail(
                        FlowStep::Verify,
                        format!(
                            "{} still raised {}s after the node returned (remediation.verifyTimeout)",
                            flow.trigger.as_deref().unwrap_or("the condition"),
                            r.verify_timeout.as_secs()
                        ),
                    )
                } else {
                    Move::Stay
                }
            }
        }
    }

    /// Why `node` may not be admitted now, given the flows under way; `None`: it may.
    fn held_back(
        &self,
        cfg: &CoreSettings,
        now: Time,
        facts: &Facts,
        node: &Node,
        active: &Active,
        pools: &super::Pools,
    ) -> Option<String> {
        let r = &cfg.remediation;
        let settings = cfg.settings_for(&node.labels);
        // Observe admits no reboot: what an operator queued before the switch waits
        // (what alerts queued is withdrawn), and is admitted if the pool acts again.
        if settings.mode == Mode::Observe {
            return Some(format!(
                "pool {} is in observe: no reboot is admitted",
                settings.name
            ));
        }
        if node.policy.fence.is_some() {
            return Some("a fence holds the node".into());
        }
        if node.policy.powered_off {
            return Some("an operator powered it off".into());
        }
        if [TELEMETRY_STALE, COLLECTOR_FAILED]
            .iter()
            .any(|c| node.conditions.contains_key(*c))
        {
            return Some("hale cannot fully see it (telemetry_stale or collector_failed)".into());
        }
        let by_alert = node
            .policy
            .flow
            .as_ref()
            .is_some_and(|f| f.by == Actor::Hale);
        if by_alert && super::suppressed(node, settings, now) {
            return Some(
                "cordonSuppressionMinutes: an operator put it back in service lately".into(),
            );
        }
        if !facts.can_reboot
            && let Some(why) = facts.missing_bmc(&node.id)
        {
            return Some(if why.starts_with("no BMC") || why.starts_with("its BMC") {
                why
            } else {
                format!("no usable BMC: {why}")
            });
        }
        let kind = r.node_type(&node.labels);
        let control_plane = is_control_plane(node);
        if let Some(t) = kind {
            if !t.allowed {
                return Some(format!("node type {} is not allowed", t.name));
            }
            if control_plane && !t.allowed_explicitly {
                return Some(format!(
                    "control-plane node: node type {} must say allowed: true to admit it",
                    t.name
                ));
            }
            if let Some(alert) = facts.blocked_types.get(&t.name) {
                return Some(format!("{alert} fires (node type {})", t.name));
            }
        } else if control_plane {
            return Some(
                "control-plane nodes are excluded unless a remediation.nodeTypes entry allows them"
                    .into(),
            );
        }
        if control_plane {
            if active.control_plane > 0 {
                return Some("another control-plane node is in remediation".into());
            }
            if let Some(other) = self.nodes.values().find(|n| {
                n.id != node.id
                    && is_control_plane(n)
                    && (n.status != Status::Ready
                        || BLIND_CONDITIONS
                            .iter()
                            .any(|c| n.conditions.contains_key(*c)))
            }) {
                return Some(format!(
                    "control-plane node {} is not Ready and seen",
                    other.id
                ));
            }
        }
        let d = domain(cfg, node);
        let in_domain = active.domains.get(&d).copied().unwrap_or(0);
        if in_domain == 0 && active.domains.len() as u32 >= r.domains_at_once {
            return Some(format!(
                "remediation.domainsAtOnce: {} domain(s) already in remediation",
                active.domains.len()
            ));
        }
        let max = kind
            .and_then(|t| t.max_per_domain)
            .unwrap_or(r.max_per_domain);
        if in_domain >= max {
            return Some(format!(
                "maxPerDomain: {in_domain} node(s) of domain {d} already in remediation"
            ));
        }
        // One counted out already (an uncordon not yet done) adds none.
        if node.status == Status::Ready
            && !counted_out(node, settings)
            && let Some(pool) = pools.get(&settings.name)
            && !pool.admits(settings.max_unavailable_percent)
        {
            return Some(format!(
                "maxUnavailablePercent {}: pool {} has {} of {} node(s) out of service",
                settings.max_unavailable_percent, settings.name, pool.out, pool.size
            ));
        }
        None
    }

    /// What holds every admission back now.
    /// With `explained`, a closed window says when it opens (worked out for a
    /// reader, not for every tick's admission).
    fn blocked(
        &self,
        cfg: &CoreSettings,
        now: Time,
        facts: &Facts,
        explained: bool,
    ) -> Vec<String> {
        let mut why = Vec::new();
        if self.trust.stale || !self.trust.source_up {
            why.push("hale's alert source is stale or down".to_string());
        }
        if let Some(b) = &facts.blocking {
            why.push(b.clone());
        }
        if let Some(w) = &cfg.remediation.window
            && !w.contains(now)
        {
            let opens = w
                .opens(now)
                .filter(|_| explained)
                .map(|o| format!("; {o}"))
                .unwrap_or_default();
            why.push(format!("outside remediation.window ({}{opens})", w.shown));
        }
        let failures = self.ledger.flow_failures.len() as u32;
        if failures > cfg.remediation.max_failures_per_hour {
            why.push(format!(
                "halted: {failures} remediation failure(s) in the last hour (remediation.maxFailuresPerHour {})",
                cfg.remediation.max_failures_per_hour
            ));
        }
        why
    }

    /// Queued flows in admission order: an operator's, then priority, then age.
    fn queue_order(&self) -> Vec<String> {
        let mut flows = Flows::default();
        for node in self.nodes.values() {
            flows.note(node);
        }
        Flows::queue(flows.queued)
    }

    /// Admit queued flows as far as the rules allow, best first.
    fn admit(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        facts: &Facts,
        queue: Vec<String>,
        out: &mut Outcome,
    ) {
        if queue.is_empty() || !self.blocked(cfg, now, facts, false).is_empty() {
            return;
        }
        let mut active = Active::of(cfg, self);
        let (mut pools, _) = count(cfg, now, &self.ledger, self.nodes.values().map(Box::as_ref));
        for id in queue {
            let node = &self.nodes[&id];
            // Queued before someone else took the node out (another hale's flow
            // cordoned it first, an operator drained it): the policy's flow
            // gives way, said once.
            if node
                .policy
                .flow
                .as_ref()
                .is_some_and(|f| f.by == Actor::Hale)
                && let Some((guardrail, why)) = not_ours(node)
            {
                let node = self.nodes.get_mut(&id).expect("queued nodes exist");
                let flow = node.policy.flow.take().expect("queued");
                node.policy.recommended_reboot = flow.trigger;
                let settings = cfg.settings_for(&node.labels);
                out.events.push(policy_verdict(
                    node,
                    settings,
                    now,
                    REBOOT,
                    Some(guardrail),
                    why,
                ));
                out.dirty.insert(id);
                continue;
            }
            if self
                .held_back(cfg, now, facts, node, &active, &pools)
                .is_some()
            {
                continue;
            }
            let settings = cfg.settings_for(&node.labels);
            if node.status == Status::Ready
                && let Some(pool) = pools.get_mut(&settings.name)
            {
                pool.out += 1;
            }
            active.add(cfg, node);
            self.start_flow(now, &id, out);
        }
    }

    /// Admitted: record it, and cordon the node unless it is out of service already.
    fn start_flow(&mut self, now: Time, id: &str, out: &mut Outcome) {
        self.pools = None;
        let node = self.nodes.get_mut(id).expect("queued nodes exist");
        let flow = node.policy.flow.as_mut().expect("queued");
        flow.step = FlowStep::Cordon;
        flow.since = now;
        flow.started = Some(now);
        let trigger = flow.trigger.clone().unwrap_or_else(|| "operator".into());
        out.events.push(event(
            id,
            now,
            EventKind::RemediationStarted {
                action: REBOOT.into(),
                trigger: trigger.clone(),
                by: flow.by.as_str().into(),
                priority: flow.priority,
            },
            format!("reboot flow started: {}", flow.reason),
        ));
        out.dirty.insert(id.into());
        let in_service = node.policy.cordon.is_none() && node.status != Status::Cordoned;
        // The cordon an earlier flow of this node left when it failed (one this
        // store recorded failing): this flow's to lift when it cures the node, not
        // someone else's that stays — nor an unknown flow's.
        let left_by_a_flow =
            node.policy.flow_failed_at.is_some() && flow_cordon(node.policy.cordon.as_ref());
        let reason = format!("{CORDON_REASON}{}", flow.reason);
        if in_service {
            flow.cordoned = true;
            take_out(node, Actor::Hale, &reason, now);
            out.events.push(event(
                id,
                now,
                EventKind::NodeCordoned {
                    by: Actor::Hale.as_str().into(),
                    reason: reason.clone(),
                },
                format!("cordoned by hale: {reason}"),
            ));
            out.events.push(step_event(
                id,
                now,
                FlowStep::Cordon,
                "cordoning before the reboot".into(),
            ));
        } else {
            flow.cordoned = left_by_a_flow;
            let said = if left_by_a_flow {
                "still cordoned by the flow that failed before: lifted if this one cures it"
            } else {
                "already out of service: it stays cordoned afterwards"
            };
            out.events
                .push(step_event(id, now, FlowStep::Cordon, said.into()));
            self.describe_and_drain(now, id, out);
        }
    }

    /// Diagnostics into the history, then the orchestrator's active drain.
    fn describe_and_drain(&mut self, now: Time, id: &str, out: &mut Outcome) {
        let node = self.nodes.get_mut(id).expect("flows are on nodes");
        let diagnostics = Diagnostics {
            status: status_name(node.status).into(),
            score: node.score.as_ref().map(|s| s.value),
            conditions: node
                .conditions
                .iter()
                .map(|(t, c)| format!("{t}: {} ({})", c.reason, c.severity.as_str()))
                .collect(),
            last_heartbeat: node.heartbeat.as_ref().map(|h| h.last),
        };
        let message = format!(
            "before the reboot: {}, score {}, conditions: {}",
            diagnostics.status,
            diagnostics
                .score
                .map_or_else(|| "none".to_string(), |s| s.to_string()),
            if diagnostics.conditions.is_empty() {
                "none".to_string()
            } else {
                diagnostics.conditions.join("; ")
            }
        );
        out.events.push(event(
            id,
            now,
            EventKind::RemediationStep {
                action: REBOOT.into(),
                step: "diagnostics".into(),
                diagnostics: Some(diagnostics),
            },
            message,
        ));
        let flow = node.policy.flow.as_mut().expect("flow under way");
        flow.step = FlowStep::Drain;
        flow.since = now;
        let reason = format!("{CORDON_REASON}{}", flow.reason);
        if let Some(c) = node.policy.cordon.as_mut() {
            c.drain();
        }
        node.policy.push(Action::Drain {
            active: true,
            reason,
        });
        out.dirty.insert(id.into());
        out.events.push(step_event(
            id,
            now,
            FlowStep::Drain,
            "draining: work moves elsewhere, disruption budgets honoured".into(),
        ));
    }

    /// The orchestrator (or the BMC) finished an action: the flow's next step.
    pub(super) fn flow_step_done(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        action: &Action,
        done: &super::Done,
        out: &mut Outcome,
    ) {
        self.fence_step_done(now, id, action, done, out);
        let Some(node) = self.nodes.get_mut(id) else {
            return;
        };
        let Some(flow) = node.policy.flow.as_mut() else {
            return;
        };
        match (flow.step, action) {
            // Blind, the drain waits: the next pass with trusted input sends it.
            (FlowStep::Cordon, Action::Cordon { .. })
                if !self.trust.stale && self.trust.source_up =>
            {
                self.describe_and_drain(now, id, out);
            }
            (FlowStep::Drain, Action::Drain { active: true, .. }) => {
                if done.blocked > 0 || done.stopping > 0 {
                    if elapsed(now, flow.since) < cfg.remediation.drain_timeout {
                        // A disruption budget said not yet, or what was evicted has
                        // not finished stopping: ask again.
                        let reason = format!("{CORDON_REASON}{}", flow.reason);
                        node.policy.push(Action::Drain {
                            active: true,
                            reason,
                        });
                        out.dirty.insert(id.into());
                    } else {
                        let why = match (done.blocked, done.stopping) {
                            (held, 0) => format!(
                                "{held} allocation(s) held on the node by disruption budgets past remediation.drainTimeout"
                            ),
                            (0, stopping) => format!(
                                "{stopping} evicted allocation(s) still stopping past remediation.drainTimeout"
                            ),
                            (held, stopping) => format!(
                                "{held} allocation(s) held on the node by disruption budgets and {stopping} still stopping past remediation.drainTimeout"
                            ),
                        };
                        self.fail_flow(cfg, now, id, FlowStep::Drain, &why, out);
                    }
                    return;
                }
                // The reboot itself is sent by the next pass, once nothing holds it.
                flow.step = FlowStep::Reboot;
                flow.since = now;
                out.dirty.insert(id.into());
            }
            (
                FlowStep::Reboot,
                Action::Power {
                    op: PowerOp::Reboot,
                    ..
                },
            ) => {
                let away = gone(node);
                let flow = node.policy.flow.as_mut().expect("matched above");
                flow.step = FlowStep::Return;
                flow.since = now;
                flow.away |= away;
                flow.confirmed = done.by_bmc;
                out.dirty.insert(id.into());
                out.events.push(step_event(
                    id,
                    now,
                    FlowStep::Return,
                    if done.by_bmc {
                        "rebooted (the BMC read it off, then on): waiting for the node to return"
                    } else {
                        "reboot sent through the orchestrator: waiting for the node to return"
                    }
                    .into(),
                ));
            }
            // A reboot a stopped process sent, taken up: the BMC read the machine
            // off and powered it on, so the reboot happened — back counts from now.
            (
                FlowStep::Return,
                Action::Power {
                    op: PowerOp::On, ..
                },
            ) if done.from_off => {
                flow.confirmed = true;
                flow.since = now;
                out.dirty.insert(id.into());
            }
            (FlowStep::Uncordon, Action::Uncordon) => self.flow_succeeded(now, id, out),
            _ => {}
        }
    }

    /// An action of a flow was refused for good: the flow fails at its step.
    /// Returns whether the action was the flow's (or a fence's).
    pub(super) fn flow_step_failed(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        action: &Action,
        why: &str,
        out: &mut Outcome,
    ) -> bool {
        if self.fence_step_failed(now, id, action, why, out) {
            return true;
        }
        let Some(flow) = self.nodes.get(id).and_then(|n| n.policy.flow.as_ref()) else {
            return false;
        };
        let step = flow.step;
        let ours = match (step, action) {
            (FlowStep::Cordon, Action::Cordon { .. })
            | (FlowStep::Reboot, Action::Power { .. })
            | (FlowStep::Uncordon, Action::Uncordon) => true,
            // An operator's drain during the flow is the operator's.
            (
                FlowStep::Drain,
                Action::Drain {
                    active: true,
                    reason,
                },
            ) => flows(reason),
            _ => false,
        };
        if ours {
            self.fail_flow(cfg, now, id, step, why, out);
            if let (Action::Drain { .. }, Some(node)) = (action, self.nodes.get_mut(id)) {
                super::queue::refuse_drain(node);
            }
        }
        ours
    }

    /// Verified: put back what the flow took out of service.
    fn put_back_after_reboot(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        out: &mut Outcome,
    ) {
        let node = self.nodes.get_mut(id).expect("flows are on nodes");
        let settings = cfg.settings_for(&node.labels);
        let ours = node.policy.flow.as_ref().is_some_and(|f| f.cordoned)
            && flow_cordon(node.policy.cordon.as_ref());
        // A score the policy would cordon for is the policy's to act on: the flow's
        // cordon stays, the policy's now (one the flow found stays whose it was).
        if ours
            && settings.mode != Mode::Observe
            && node
                .score
                .as_ref()
                .is_some_and(|s| u32::from(s.value) < settings.cordon_below)
        {
            let score = node.score.as_ref().map_or(100, |s| s.value);
            let reason = format!("score {score} below cordonBelow after a reboot");
            if let Some(c) = node.policy.cordon.as_mut() {
                c.reason = reason.clone();
                // Said on the node too, so the cordon reads as the policy's.
                node.policy.push(Action::Cordon {
                    by: Actor::Hale,
                    reason,
                });
            }
            out.events.push(step_event(
                id,
                now,
                FlowStep::Uncordon,
                format!(
                    "verified, but score {score} is below cordonBelow {}: it stays cordoned, for the policy",
                    settings.cordon_below
                ),
            ));
            return self.flow_succeeded(now, id, out);
        }
        out.events.push(step_event(
            id,
            now,
            FlowStep::Uncordon,
            if ours {
                "verified: uncordoning what the flow cordoned".into()
            } else {
                "verified: the node was out of service before the flow (or an operator took it over) and stays so".into()
            },
        ));
        out.dirty.insert(id.into());
        if !ours {
            return self.flow_succeeded(now, id, out);
        }
        let flow = node.policy.flow.as_mut().expect("flow under way");
        flow.step = FlowStep::Uncordon;
        flow.since = now;
        node.policy.cordon = None;
        node.policy.conclusion = None;
        node.status = Status::Ready;
        node.policy.push(Action::Uncordon);
        self.pools = None;
        out.events.push(event(
            id,
            now,
            EventKind::NodeUncordoned {
                by: Actor::Hale.as_str().into(),
                reason: "reboot verified".into(),
            },
            "uncordoned by hale: the reboot flow verified its repair".into(),
        ));
    }

    fn flow_succeeded(&mut self, now: Time, id: &str, out: &mut Outcome) {
        let node = self.nodes.get_mut(id).expect("flows are on nodes");
        let Some(flow) = node.policy.flow.take() else {
            return;
        };
        node.policy.flow_failed_at = None;
        if flow.trigger.is_some() {
            node.policy.reboots.push(now);
        }
        out.dirty.insert(id.into());
        out.events.push(event(
            id,
            now,
            EventKind::RemediationSucceeded {
                action: REBOOT.into(),
            },
            {
                let started = flow.started.unwrap_or(flow.requested);
                format!(
                    "reboot flow succeeded in {}s (queued {}s before it started): {}",
                    elapsed(now, started).as_secs(),
                    elapsed(started, flow.requested).as_secs(),
                    flow.reason
                )
            },
        ));
    }

    /// The flow fails at `step`: the node stays cordoned, no alert re-admits it for
    /// `retryAfter`, and the failure counts against `maxFailuresPerHour`.
    fn fail_flow(
        &mut self,
        cfg: &CoreSettings,
        now: Time,
        id: &str,
        step: FlowStep,
        why: &str,
        out: &mut Outcome,
    ) {
        let node = self.nodes.get_mut(id).expect("flows are on nodes");
        if node.policy.flow.take().is_none() {
            return;
        }
        // The flow's own drain and power action; an operator's drain stays.
        node.policy.pending.retain(|p| match &p.action {
            Action::Drain {
                active: true,
                reason,
            } => !flows(reason),
            Action::Power { .. } => false,
            _ => true,
        });
        node.policy.flow_failed_at = Some(now);
        self.ledger.flow_failures.push(now);
        out.ledger = true;
        out.dirty.insert(id.into());
        out.events.push(event(
            id,
            now,
            EventKind::RemediationFailed {
                action: REBOOT.into(),
                step: step.as_str().into(),
                cancelled: false,
            },
            format!(
                "reboot flow failed at {}: {why}; the node stays cordoned",
                step.as_str()
            ),
        ));
        let failures = self.ledger.flow_failures.len() as u32;
        let max = cfg.remediation.max_failures_per_hour;
        if failures == max + 1 {
            let settings = cfg.settings_for(&node.labels);
            out.events.push(policy_verdict(
                node,
                settings,
                now,
                REBOOT,
                Some("remediation.maxFailuresPerHour"),
                format!(
                    "reboot flow halted: {failures} failures in the last hour (remediation.maxFailuresPerHour {max}); the pool is the problem, not the nodes"
                ),
            ));
        }
    }

    /// The queue, the flows under way and what holds them, for `remediation list`.
    pub fn remediations(&self, cfg: &CoreSettings, now: Time, facts: &Facts) -> Remediations {
        let entry = |node: &Node, flow: &Flow, waiting: Option<String>| Entry {
            node: node.id.clone(),
            action: REBOOT.into(),
            step: flow.step.as_str().into(),
            since: flow.since,
            priority: flow.priority,
            trigger: flow.trigger.clone().unwrap_or_else(|| "operator".into()),
            domain: domain(cfg, node),
            waiting,
        };
        let mut view = Remediations {
            blocked: self.blocked(cfg, now, facts, true),
            failures_last_hour: self.ledger.flow_failures.len() as u32,
            ..Remediations::default()
        };
        let mut active = Active::of(cfg, self);
        let (pools, _) = count(cfg, now, &self.ledger, self.nodes.values().map(Box::as_ref));
        for id in self.queue_order() {
            let node = &self.nodes[&id];
            let flow = node.policy.flow.as_ref().expect("queued");
            let waiting = self.held_back(cfg, now, facts, node, &active, &pools);
            if waiting.is_none() && view.blocked.is_empty() {
                // Would be admitted on the next pass: the next ones count it (none
                // is while something holds every admission back).
                active.add(cfg, node);
            }
            view.queued.push(entry(node, flow, waiting));
        }
        for node in self.nodes.values() {
            if let Some(flow) = &node.policy.flow
                && flow.step != FlowStep::Queued
            {
                view.in_flight.push(entry(node, flow, None));
            }
            if let Some(fence) = &node.policy.fence {
                view.fencing.push(Entry {
                    node: node.id.clone(),
                    action: "fence".into(),
                    step: fence.step.as_str().into(),
                    since: fence.since,
                    priority: 0,
                    trigger: HEARTBEAT_MISSED.into(),
                    domain: domain(cfg, node),
                    waiting: None,
                });
            }
        }
        view
    }

    /// Flows under way (admitted, not finished): the `hale_remediation_in_flight` gauge.
    pub fn remediations_in_flight(&self) -> usize {
        self.nodes
            .values()
            .filter(|n| {
                n.policy
                    .flow
                    .as_ref()
                    .is_some_and(|f| f.step != FlowStep::Queued)
            })
            .count()
    }
}

/// What [`Fleet::next_move`] decides for one flow.
enum Move {
    Stay,
    Fail(FlowStep, String),
    PutBack,
    /// The cordon is done: describe and drain.
    Drain,
    Succeed,
}

/// The flows under way, by failure domain.
struct Active {
    domains: BTreeMap<String, u32>,
    control_plane: u32,
}

impl Active {
    fn of(cfg: &CoreSettings, fleet: &Fleet) -> Active {
        let mut active = Active {
            domains: BTreeMap::new(),
            control_plane: 0,
        };
        for node in fleet.nodes.values() {
            if node
                .policy
                .flow
                .as_ref()
                .is_some_and(|f| f.step != FlowStep::Queued)
            {
                active.add(cfg, node);
            }
        }
        active
    }

    fn add(&mut self, cfg: &CoreSettings, node: &Node) {
        *self.domains.entry(domain(cfg, node)).or_default() += 1;
        if is_control_plane(node) {
            self.control_plane += 1;
        }
    }
}
