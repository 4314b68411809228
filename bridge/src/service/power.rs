//! Out-of-band power at the edge: each node's BMC, the manual power and reboot
//! verbs, the power actions of the reboot flow and of fences, and the blocking
//! alerts the flow reads from Alertmanager.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tracing::{info, warn};

use super::Hale;
use crate::bmc::{self, BmcError, Controller, Failure, Target, Verb};
use crate::config::Loaded;
use crate::core::policy::{Action, Actor, Done, Facts, PowerDone, PowerOp, Remediations};
use crate::core::settings::Mode;
use crate::core::{CoreError, Outcome};
use crate::orchestrator::{self, OrchestratorError};

/// How often the blocking alerts are read from Alertmanager.
const BLOCKING_EVERY: Duration = Duration::from_secs(15);

/// Why a power verb or a reboot was not done.
#[derive(Debug, thiserror::Error)]
pub enum PowerError {
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The node has no BMC hale can reach (what is missing is said).
    #[error("node {node}: {detail}")]
    NoBmc { node: String, detail: String },
    /// This replica does not lead.
    #[error("{0}")]
    NotLeader(String),
    /// The node's pool observes: the reboot was recorded as recommended.
    #[error(
        "node {node}: pool {pool} is in observe mode: the reboot is recorded as recommended and nothing is done; set the pool's mode to cordon or above to reboot"
    )]
    Observe { node: String, pool: String },
    #[error(transparent)]
    Bmc(BmcError),
    /// Taken in memory; the store did not write it (yet).
    #[error(transparent)]
    Unwritten(super::StepError),
}

impl From<super::StepError> for PowerError {
    fn from(e: super::StepError) -> Self {
        match e {
            super::StepError::Core(c) => PowerError::Core(c),
            e => PowerError::Unwritten(e),
        }
    }
}

/// What a manual power verb found and did.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PowerReport {
    pub node: String,
    pub action: String,
    pub force: bool,
    pub result: String,
    #[serde(flatten)]
    pub outcome: bmc::Outcome,
}

impl Hale {
    /// A power verb is refused while a reboot flow or a fence holds the node.
    fn refuse_busy(&self, id: &str, verb: Verb) -> Result<(), PowerError> {
        let fleet = self.lock_fleet();
        let node = fleet
            .nodes
            .get(id)
            .ok_or_else(|| CoreError::UnknownNode(id.into()))?;
        let powering_on = matches!(verb, Verb::On | Verb::Cycle | Verb::Reset);
        match crate::core::policy::power_busy(node, powering_on) {
            Some(doing) => Err(CoreError::Busy {
                node: id.into(),
                doing,
            }
            .into()),
            None => Ok(()),
        }
    }

    /// The node's BMC: its inventory entry, the orchestrator's word, the template.
    fn bmc_target(&self, cfg: &Loaded, id: &str) -> Result<Target, PowerError> {
        let (hostname, labels, by_alerts) = {
            let fleet = self.lock_fleet();
            let node = fleet
                .nodes
                .get(id)
                .ok_or_else(|| CoreError::UnknownNode(id.into()))?;
            (
                node.hostname.clone(),
                node.labels.clone(),
                node.known_from == crate::core::Origin::Alerts,
            )
        };
        let annotation = self.orchestrator.bmc_address(id);
        cfg.bmc
            .target(
                id,
                hostname.as_deref(),
                &labels,
                annotation.as_deref(),
                by_alerts,
            )
            .map_err(|e| PowerError::NoBmc {
                node: id.into(),
                detail: e.detail,
            })
    }

    fn controller(&self, cfg: &Loaded, target: &Target) -> Result<Controller, BmcError> {
        let timing = cfg.bmc.timing;
        let observer: Arc<dyn bmc::Observer> = self.metrics.bmc.clone();
        Ok(Controller::new(
            bmc::connect(target, timing)?,
            timing,
            Some(observer),
        ))
    }

    /// `hale node power NODE VERB`: done at once (not queued), confirmed, recorded
    /// as `NODE_POWER`. Only `status` is a read; the others are the leader's and
    /// refused while a reboot flow or a fence holds the node.
    pub async fn power(
        self: &Arc<Self>,
        id: &str,
        verb: Verb,
        force: bool,
    ) -> Result<PowerReport, PowerError> {
        let cfg = self.config();
        let (c, node) = (cfg.clone(), id.to_string());
        let target = self
            .off_runtime(move |this| {
                if verb != Verb::Status {
                    this.leading().map_err(PowerError::NotLeader)?;
                    this.refuse_busy(&node, verb)?;
                }
                this.bmc_target(&c, &node)
            })
            .await?;
        // The operator's intent on disk before the request leaves: a hale stopped
        // before the answer must not fence the machine back on.
        let held_before = if verb == Verb::Off {
            Some(self.hold_powered_off(id, true).await)
        } else {
            None
        };
        let result = match self.controller(&cfg, &target) {
            Ok(c) => c.run(verb, force).await,
            Err(e) => Err(e),
        };
        let result = result.map_err(|e| e.during(id, verb.as_str()));
        // Refused (not merely unconfirmed: it may be off): as it was.
        if let (Some(before), Err(e)) = (held_before, &result)
            && e.class != Failure::Unconfirmed
        {
            self.hold_powered_off(id, before).await;
        }
        if verb != Verb::Status {
            self.record_power(id, verb, force, Actor::Operator, &result)
                .await;
        }
        let outcome = result.map_err(PowerError::Bmc)?;
        Ok(PowerReport {
            node: id.into(),
            action: verb.as_str().into(),
            force,
            result: power_result(&outcome).into(),
            outcome,
        })
    }

    /// Hold `id` powered off (or not) by an operator; whether it was before.
    async fn hold_powered_off(self: &Arc<Self>, id: &str, off: bool) -> bool {
        let this = self.clone();
        let id = id.to_string();
        tokio::task::spawn_blocking(move || {
            let mut before = false;
            if let Err(e) = this.apply(|fleet, _, _| {
                let (out, was) = fleet.hold_powered_off(&id, off);
                before = was;
                Ok(out)
            }) {
                warn!(node = %id, error = %e, "the operator's power-off could not be recorded before it was sent");
            }
            before
        })
        .await
        .unwrap_or(false)
    }

    /// Record `NODE_POWER` for a verb done (or failed) on `id`.
    async fn record_power(
        self: &Arc<Self>,
        id: &str,
        verb: Verb,
        force: bool,
        by: Actor,
        result: &Result<bmc::Outcome, BmcError>,
    ) {
        let (label, message) = match result {
            Ok(o) => (
                power_result(o),
                if o.sent.is_empty() {
                    format!(
                        "power {} by {}: already {}, nothing sent",
                        verb.as_str(),
                        by.as_str(),
                        o.after.as_str()
                    )
                } else {
                    format!(
                        "power {} by {}: {} → {} (sent {})",
                        verb.as_str(),
                        by.as_str(),
                        o.before.as_str(),
                        o.after.as_str(),
                        o.sent.join(", ")
                    )
                },
            ),
            Err(e) => (
                "failed",
                format!("power {} by {} failed: {e}", verb.as_str(), by.as_str()),
            ),
        };
        let power = PowerDone {
            action: verb.as_str().into(),
            result: label.into(),
            by,
            force,
            message,
        };
        let this = self.clone();
        let node = id.to_string();
        let recorded = tokio::task::spawn_blocking(move || {
            this.apply(|fleet, _, now| Ok(fleet.record_power(now, &node, power)))
        })
        .await;
        if let Err(e) = recorded {
            warn!(error = %e, "recording a power operation failed");
        }
    }

    /// `hale node reboot`: queue the node for the reboot flow. A node with no BMC
    /// and an orchestrator that cannot reboot it is refused at once.
    pub fn request_reboot(
        &self,
        id: &str,
        reason: &str,
        force: bool,
    ) -> Result<Outcome, PowerError> {
        self.leading().map_err(PowerError::NotLeader)?;
        let cfg = self.config();
        if let Err(PowerError::NoBmc { node, detail }) = self.bmc_target(&cfg, id)
            && !self.orchestrator.can_reboot()
        {
            return Err(PowerError::NoBmc { node, detail });
        }
        let reason = if reason.trim().is_empty() {
            "no reason given".to_string()
        } else {
            reason.trim().to_string()
        };
        let pool = {
            let fleet = self.lock_fleet();
            let node = fleet
                .nodes
                .get(id)
                .ok_or_else(|| CoreError::UnknownNode(id.into()))?;
            let settings = cfg.core.settings_for(&node.labels);
            (settings.mode == Mode::Observe).then(|| settings.name.clone())
        };
        if let Some(pool) = pool {
            self.apply(|fleet, cfg, now| fleet.recommend_reboot(cfg, now, id, &reason))?;
            return Err(PowerError::Observe {
                node: id.into(),
                pool,
            });
        }
        let out =
            self.apply_durable(|fleet, _, now| fleet.request_reboot(now, id, &reason, force))?;
        // Its BMC is looked for now, not at the next round.
        self.facts_now.notify_one();
        Ok(out)
    }

    /// The reboot flow's queue, its flows under way and what holds them.
    pub fn remediations(&self) -> Remediations {
        let cfg = self.config();
        let facts = self.facts();
        self.lock_fleet()
            .remediations(&cfg.core, Utc::now(), &facts)
    }

    /// The blocking facts the flow admits by, as last read; until they have been
    /// read once, blocked.
    pub(super) fn facts(&self) -> Facts {
        if !self.facts_read.load(std::sync::atomic::Ordering::Acquire) {
            return Facts {
                blocking: Some("the blocking alerts have not been read yet".into()),
                bmc_checked: Some(Default::default()),
                ..Facts::default()
            };
        }
        self.facts.lock().expect("facts lock").clone()
    }

    /// A flow's or a fence's power action. A reboot is recorded as sent before it
    /// leaves, so it is never sent twice; without a BMC a reboot is the
    /// orchestrator's own (if it has one), recorded the same way. Every BMC failure is final for the step:
    /// the flow fails there, rather than retrying a power change blindly.
    pub(super) async fn perform_power(
        self: &Arc<Self>,
        node: &str,
        op: PowerOp,
        force: bool,
        at: u64,
    ) -> Result<Done, OrchestratorError> {
        let cfg = self.config();
        let action = Action::Power { op, force };
        let (c, id) = (cfg.clone(), node.to_string());
        let target = match self.off_runtime(move |this| this.bmc_target(&c, &id)).await {
            Ok(t) => Some(t),
            Err(PowerError::NoBmc { .. }) if op == PowerOp::Reboot => None,
            Err(e) => {
                return Err(OrchestratorError::refused(e.to_string()).during(node, action.name()));
            }
        };
        // Through the BMC or the orchestrator's own (Slurm's `scontrol reboot`), a
        // reboot is on disk as sent before it leaves: one whose answer was lost —
        // a timeout, a crash — is waited out (`returnTimeout`), never sent again.
        if op == PowerOp::Reboot && !self.mark_sending(node, op).await {
            return Err(OrchestratorError::transient(
                "the store could not record the reboot before sending it; not sent",
            )
            .during(node, action.name()));
        }
        // A fence's power-off likewise: one an earlier process sent is not sent
        // again, only waited for (a BMC may take its time to act on it).
        let id = node.to_string();
        let resumed_off = op == PowerOp::Off
            && self
                .off_runtime(move |this| {
                    let fleet = this.lock_fleet();
                    let started = fleet.trust.watching_since;
                    fleet
                        .nodes
                        .get(&id)
                        .and_then(|n| n.policy.fence.as_ref())
                        .and_then(|f| f.sent)
                        .is_some_and(|t| t < started)
                })
                .await;
        if op == PowerOp::Off && !resumed_off && !self.mark_sending(node, op).await {
            return Err(OrchestratorError::transient(
                "the store could not record the power-off before sending it; not sent",
            )
            .during(node, action.name()));
        }
        let Some(target) = target else {
            return match orchestrator::perform(
                self.orchestrator.as_ref(),
                node,
                &action,
                &Default::default(),
            )
            .await
            {
                // It may have gone (a timeout, a controller that took it and then
                // failed): waited out as sent, the node's return or `returnTimeout`
                // ending the flow.
                Err(e) if e.class == orchestrator::Class::Transient => {
                    warn!(node, error = %e, "the orchestrator's reboot went unconfirmed: not sent again; waiting for the node to return");
                    Ok(Done::default())
                }
                done => done,
            };
        };
        let verb = match op {
            PowerOp::Reboot => Verb::Reboot,
            PowerOp::Off => Verb::Off,
            PowerOp::On => Verb::On,
        };
        info!(node, verb = verb.as_str(), force, bmc = %target.address, "power through the BMC");
        // Still queued: an operator's uncordon withdraws a reboot under way.
        let (this, id) = (self.clone(), node.to_string());
        let wanted: bmc::Wanted = Box::new(move || {
            let (this, id) = (this.clone(), id.clone());
            Box::pin(async move {
                this.off_runtime(move |this| {
                    this.lock_fleet()
                        .nodes
                        .get(&id)
                        .is_some_and(|n| n.policy.pending.iter().any(|p| p.id == at))
                })
                .await
            })
        });
        // A power-on that takes up a reboot a stopped process sent: that
        // process may have stopped while the graceful off was under way. A reboot
        // hale's policy started leaves a machine someone switched off as it is
        // (an operator's `hale node reboot` starts it).
        let id = node.to_string();
        let (sent, automated) = if matches!(op, PowerOp::On | PowerOp::Reboot) {
            self.off_runtime(move |this| {
                let fleet = this.lock_fleet();
                let flow = fleet.nodes.get(&id).and_then(|n| n.policy.flow.as_ref());
                (
                    flow.is_some_and(|f| f.sent.is_some()),
                    flow.is_some_and(|f| f.by == Actor::Hale),
                )
            })
            .await
        } else {
            (false, false)
        };
        let finishing = op == PowerOp::On && sent;
        let result = match self.controller(&cfg, &target) {
            Ok(c) if finishing => c.finish_reboot().await,
            Ok(c) if resumed_off => c.finish_off().await,
            Ok(c) if automated => {
                c.forcing_only_while(wanted)
                    .leaving_off()
                    .run(verb, force)
                    .await
            }
            Ok(c) => c.forcing_only_while(wanted).run(verb, force).await,
            Err(e) => Err(e),
        }
        .map_err(|e| e.during(node, verb.as_str()));
        self.record_power(node, verb, force, Actor::Hale, &result)
            .await;
        match result {
            Ok(o) => Ok(Done {
                by_bmc: true,
                from_off: o.sent.contains(&"on"),
                found_off: op == PowerOp::Off
                    && !resumed_off
                    && o.before == crate::bmc::PowerState::Off
                    && o.sent.is_empty(),
                ..Done::default()
            }),
            Err(e) if e.class == crate::bmc::Failure::Unconfirmed => {
                Err(OrchestratorError::unconfirmed(e.to_string()))
            }
            Err(e) => Err(OrchestratorError::refused(e.to_string())),
        }
    }

    /// Persist that a flow's reboot or a fence's power-off (`op`) is about to be
    /// sent; whether the flow or fence still wants it (an operator may have
    /// cancelled it meanwhile) and that is on disk.
    async fn mark_sending(self: &Arc<Self>, node: &str, op: PowerOp) -> bool {
        let this = self.clone();
        let id = node.to_string();
        tokio::task::spawn_blocking(move || {
            this.apply(|fleet, _, now| {
                Ok(if op == PowerOp::Reboot {
                    fleet.reboot_sending(now, &id)
                } else {
                    fleet.fence_off_sending(now, &id)
                })
            })
            .is_ok_and(|out| out.dirty.contains(&id))
                && this.writer.lock().expect("writer lock").pending.is_none()
        })
        .await
        .unwrap_or(false)
    }

    /// The nodes a flow or a fence may soon need the BMC of (a flow queued or
    /// under way, a fence, a heartbeat missed): whether hale can reach it.
    fn bmc_facts(&self, cfg: &Loaded, facts: &mut Facts) {
        type Wanted = (
            String,
            Option<String>,
            std::collections::BTreeMap<String, String>,
            bool,
        );
        let wanted: Vec<Wanted> = {
            let fleet = self.lock_fleet();
            fleet
                .nodes
                .values()
                .filter(|n| {
                    n.policy.flow.is_some()
                        || n.policy.fence.is_some()
                        || n.conditions.contains_key(crate::core::HEARTBEAT_MISSED)
                })
                .map(|n| {
                    (
                        n.id.clone(),
                        n.hostname.clone(),
                        n.labels.clone(),
                        n.known_from == crate::core::Origin::Alerts,
                    )
                })
                .collect()
        };
        let mut checked = std::collections::BTreeSet::new();
        for (id, hostname, labels, by_alerts) in wanted {
            let annotation = self.orchestrator.bmc_address(&id);
            if let Err(e) = cfg.bmc.target(
                &id,
                hostname.as_deref(),
                &labels,
                annotation.as_deref(),
                by_alerts,
            ) {
                facts.no_bmc.insert(id.clone(), e.detail);
            }
            checked.insert(id);
        }
        facts.bmc_checked = Some(checked);
        facts.can_reboot = self.orchestrator.can_reboot();
    }

    /// Read the blocking alerts, and look for the BMCs flows and fences may need,
    /// every [`BLOCKING_EVERY`] (and at once when an operator asks for a reboot).
    /// An Alertmanager that cannot answer blocks: the flow admits nothing on
    /// evidence it cannot read.
    pub async fn blocking_loop(self: Arc<Self>) {
        let beat = self.liveness.watch("blocking", BLOCKING_EVERY * 20);
        // The last read's failure, logged when it starts, changes and ends.
        let mut unreadable: Option<String> = None;
        loop {
            beat.beat();
            let mut failed: Option<String> = None;
            let cfg = self.config();
            let client = self.client.read().expect("client lock").clone();
            let c = cfg.clone();
            let mut facts = self
                .off_runtime(move |this| {
                    let mut facts = Facts::default();
                    this.bmc_facts(&c, &mut facts);
                    facts
                })
                .await;
            for filters in &cfg.blocking.all {
                match client.firing(filters).await {
                    Ok(names) if !names.is_empty() => {
                        facts.blocking = Some(format!(
                            "blocking alert {} fires (remediation.blockingAlerts)",
                            names[0]
                        ));
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        facts.blocking = Some(format!("cannot read the blocking alerts: {e}"));
                        failed = Some(e.to_string());
                        break;
                    }
                }
            }
            for (name, sets) in &cfg.blocking.types {
                for filters in sets {
                    match client.firing(filters).await {
                        Ok(names) if !names.is_empty() => {
                            facts.blocked_types.insert(name.clone(), names[0].clone());
                            break;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            facts
                                .blocked_types
                                .insert(name.clone(), format!("unreadable blocking alerts ({e})"));
                            failed.get_or_insert_with(|| e.to_string());
                            break;
                        }
                    }
                }
            }
            if failed != unreadable {
                match &failed {
                    Some(e) => warn!(
                        error = %e,
                        "cannot read remediation.blockingAlerts from Alertmanager: no reboot flow is admitted until it can"
                    ),
                    None => info!("remediation.blockingAlerts can be read again"),
                }
                unreadable = failed;
            }
            *self.facts.lock().expect("facts lock") = facts;
            self.facts_read
                .store(true, std::sync::atomic::Ordering::Release);
            tokio::select! {
                () = tokio::time::sleep(BLOCKING_EVERY) => {}
                () = self.facts_now.notified() => {}
            }
        }
    }
}

/// `done`, or `unchanged` when the machine was already as asked.
fn power_result(o: &bmc::Outcome) -> &'static str {
    if o.sent.is_empty() {
        "unchanged"
    } else {
        "done"
    }
}

impl PowerError {
    /// Whether the BMC itself failed (rather than hale lacking a way to it).
    pub fn is_bmc(&self) -> bool {
        matches!(self, PowerError::Bmc(e) if e.class != Failure::Missing)
    }
}
