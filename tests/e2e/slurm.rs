//! The Slurm orchestrator against a real Slurm on this machine: its own munged,
//! slurmctld and three slurmd (one per node, each on its own loopback port), all
//! in the foreground as the test's children, stopped by PID; real jobs submitted
//! with `sbatch`; the real hale binary.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::*;

/// A Slurm cluster of `n1`, `n2` (gpu) and `n3` in one partition.
struct SlurmCluster {
    conf: PathBuf,
    children: Vec<Child>,
    ctld_port: u16,
    dir: tempfile::TempDir,
}

impl SlurmCluster {
    async fn start() -> SlurmCluster {
        SlurmCluster::start_with("").await
    }

    /// A cluster whose slurm.conf has `more` lines too.
    async fn start_with(more: &str) -> SlurmCluster {
        for b in ["munged", "slurmctld", "slurmd", "sinfo", "setpriv"] {
            require(b);
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["state", "spool", "log", "munge"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        // munged runs as munge and keeps its socket in its own directory.
        let chown = Command::new("chown")
            .arg("munge:munge")
            .arg(d.join("munge"))
            .status()
            .unwrap();
        assert!(chown.success());
        let mut path = d.to_path_buf();
        loop {
            // The socket's directory must be reachable by munge.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
            if !path.pop() || path == Path::new("/tmp") || path == Path::new("/") {
                break;
            }
        }
        let socket = d.join("munge/munge.socket");
        let ctld_port = free_port();
        let conf = d.join("slurm.conf");
        let nodes: String = ["n1", "n2", "n3"]
            .iter()
            .map(|n| {
                let feature = if *n == "n3" { "" } else { " Feature=gpu" };
                format!(
                    "NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={} CPUs=2 RealMemory=1000{feature}\n",
                    free_port()
                )
            })
            .collect();
        std::fs::write(
            &conf,
            format!(
                "ClusterName=hale\nSlurmctldHost=localhost\nSlurmctldPort={ctld_port}\nSlurmdPort={}\n\
                 SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nAuthInfo=socket={}\nCredType=cred/munge\n\
                 ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nSelectType=select/cons_tres\n\
                 SelectTypeParameters=CR_Core\nReturnToService=2\nJobAcctGatherType=jobacct_gather/none\n\
                 AccountingStorageType=accounting_storage/none\nStateSaveLocation={}\nSlurmdSpoolDir={}/%n\n\
                 SlurmctldPidFile={}/slurmctld.pid\nSlurmdPidFile={}/slurmd-%n.pid\n\
                 SlurmctldLogFile={}/slurmctld.log\nSlurmdLogFile={}/slurmd-%n.log\nMessageTimeout=5\n\
                 {more}{nodes}PartitionName=batch Nodes=n[1-3] Default=YES State=UP\n",
                free_port(),
                socket.display(),
                d.join("state").display(),
                d.join("spool").display(),
                d.display(),
                d.display(),
                d.join("log").display(),
                d.join("log").display(),
            ),
        )
        .unwrap();
        let mut cluster = SlurmCluster {
            conf,
            children: Vec::new(),
            ctld_port,
            dir,
        };
        let d = cluster.dir.path().to_path_buf();
        let munged = Command::new("setpriv")
            .args([
                "--reuid=munge",
                "--regid=munge",
                "--init-groups",
                "munged",
                "-F",
                "-S",
            ])
            .arg(&socket)
            .arg(format!(
                "--pid-file={}",
                d.join("munge/munged.pid").display()
            ))
            .arg(format!("--seed-file={}", d.join("munge/seed").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        cluster.children.push(munged);
        eventually("munged", Duration::from_secs(10), || async {
            socket.exists().then_some(())
        })
        .await;
        cluster.start_ctld();
        for n in ["n1", "n2", "n3"] {
            let child = Command::new("slurmd")
                .args(["-D", "-N", n])
                .env("SLURM_CONF", &cluster.conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            cluster.children.push(child);
        }
        eventually("three idle nodes", Duration::from_secs(60), || async {
            let out = cluster.run("sinfo", &["-h", "-o", "%T %D"]);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            (text.trim() == "idle 3").then_some(())
        })
        .await;
        cluster
    }

    fn start_ctld(&mut self) {
        let ctld = Command::new("slurmctld")
            .args(["-D", "-i"])
            .env("SLURM_CONF", &self.conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(ctld);
    }

    /// Stop slurmctld alone (the second child), by PID.
    fn stop_ctld(&mut self) {
        let mut ctld = self.children.remove(1);
        let _ = ctld.kill();
        let _ = ctld.wait();
    }

    fn run(&self, command: &str, args: &[&str]) -> Output {
        Command::new(command)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap()
    }

    /// Submit `sleep 600` to `node`; the job's id.
    fn submit(&self, node: &str, requeue: bool) -> String {
        let flag = if requeue { "--requeue" } else { "--no-requeue" };
        let out = self.run(
            "sbatch",
            &[
                "--parsable",
                "-w",
                node,
                flag,
                "-o",
                "/dev/null",
                "--wrap",
                "sleep 600",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn job(&self, id: &str) -> String {
        String::from_utf8_lossy(&self.run("scontrol", &["show", "job", id]).stdout).to_string()
    }

    fn node(&self, name: &str) -> Value {
        // Null while slurmctld cannot answer.
        let out = self.run("sinfo", &["--json"]);
        let all: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        all["nodes"]
            .as_array()
            .and_then(|nodes| nodes.iter().find(|n| n["name"] == name).cloned())
            .unwrap_or(Value::Null)
    }
}

impl Drop for SlurmCluster {
    fn drop(&mut self) {
        let _ = self.ctld_port;
        for c in self.children.iter_mut().rev() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn drained(n: &Value) -> bool {
    n["state_flags"].as_array().is_some_and(|f| {
        f.iter()
            .any(|x| x.as_str().is_some_and(|s| s.starts_with("DRAIN")))
    })
}

/// A real Alertmanager holding the watchdog and the heartbeats of the cluster's
/// three nodes.
async fn reporting() -> Alertmanager {
    let am = Alertmanager::start(None).await;
    am.fire(&[
        watchdog(),
        heartbeat("n1"),
        heartbeat("n2"),
        heartbeat("n3"),
    ])
    .await;
    am
}

#[tokio::test(flavor = "multi_thread")]
async fn slurm_drains_requeues_fails_and_sees_the_operator() {
    let slurm = SlurmCluster::start().await;
    let am = reporting().await;
    let requeued = slurm.submit("n1", true);
    let failed = slurm.submit("n1", false);
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 34 }}\n\
         orchestrator: {{ kind: slurm, slurmConf: {}, timeout: 20s }}\n",
        slurm.conf.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;

    // Inventory: every node, its jobs, its partition and features as labels.
    let n1 = hale
        .wait_node("n1 with its two jobs", "n1", |n| {
            n["jobs"] == 2 && n["score"] == 100
        })
        .await;
    assert_eq!(n1["status"], "Ready");

    // A policy cordon: a drain with hale's reason; the ceiling holds the second.
    am.fire(&[gpu_ecc_uncorrectable("n2")]).await;
    eventually("n2 drained by hale", Duration::from_secs(30), || async {
        let n = slurm.node("n2");
        (drained(&n) && n["reason"].as_str().unwrap_or("").starts_with("hale: ")).then_some(())
    })
    .await;
    am.fire(&[gpu_ecc_uncorrectable("n3")]).await;
    let halted = eventually(
        "n3 held by the ceiling",
        Duration::from_secs(30),
        || async {
            let e = hale.events("n3", "type=POLICY_HALTED").await;
            e["events"].as_array().unwrap().first().cloned()
        },
    )
    .await;
    assert_eq!(halted["guardrail"], "maxUnavailablePercent");
    assert!(!drained(&slurm.node("n3")));

    // hale's drain made again by an operator with a reason of their own: theirs.
    let out = slurm.run(
        "scontrol",
        &[
            "update",
            "nodename=n2",
            "state=drain",
            "reason=ops: bios update",
        ],
    );
    assert!(out.status.success());
    let n2 = hale
        .wait_node("n2's drain the operator's", "n2", |n| {
            n["cordon"]["by"] == "operator"
        })
        .await;
    assert_eq!(n2["cordon"]["reason"], "ops: bios update");

    // Score and health where `scontrol show node` shows them.
    eventually("n2's comment", Duration::from_secs(30), || async {
        let out = slurm.run("scontrol", &["show", "node", "n2"]);
        String::from_utf8_lossy(&out.stdout)
            .contains("Comment=hale: score=55 health=Degraded")
            .then_some(())
    })
    .await;

    // An active drain: the requeueable job requeued (same id), the other failed
    // with the message in its admin comment.
    hale.cli_ok(&[
        "node",
        "drain",
        "n1",
        "--active",
        "--reason",
        "failing disk",
    ]);
    eventually(
        "the jobs moved and failed",
        Duration::from_secs(30),
        || async {
            let moved = slurm.job(&requeued);
            let gone = slurm.job(&failed);
            (moved.contains("Restarts=1") && gone.contains("JobState=CANCELLED")).then_some(())
        },
    )
    .await;
    assert!(
        slurm
            .job(&failed)
            .contains("AdminComment=hale: node n1 drained (active)"),
        "{}",
        slurm.job(&failed)
    );
    let drain = eventually("the drain recorded", Duration::from_secs(150), || async {
        let e = hale.events("n1", "type=NODE_DRAINED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(
        (
            drain["moved"].clone(),
            drain["failed"].clone(),
            drain["active"].clone()
        ),
        (json!(1), json!(1), json!(true)),
        "{drain}"
    );
    assert!(
        drain["message"].as_str().unwrap().contains("1 failed"),
        "{drain}"
    );
    // Recorded once the node held no job still running or completing.
    let on_n1 = slurm.run("squeue", &["-h", "-w", "n1", "-t", "R,CG", "-o", "%i %T"]);
    assert_eq!(
        String::from_utf8_lossy(&on_n1.stdout).trim(),
        "",
        "jobs still on n1"
    );

    // An operator's drain and resume with scontrol: the operator's.
    let out = slurm.run(
        "scontrol",
        &["update", "nodename=n3", "state=drain", "reason=maintenance"],
    );
    assert!(out.status.success());
    let n3 = hale
        .wait_node("n3 drained outside hale", "n3", |n| {
            n["status"] == "Cordoned"
        })
        .await;
    assert_eq!(n3["cordon"]["by"], "operator");
    let out = slurm.run("scontrol", &["update", "nodename=n3", "state=resume"]);
    assert!(out.status.success());
    hale.wait_node("n3 resumed", "n3", |n| n["status"] == "Ready")
        .await;
    let back = hale.events("n3", "type=NODE_UNCORDONED").await;
    assert_eq!(back["events"][0]["by"], "operator");

    // An alert naming a node Slurm does not list brings none in: `GET
    // /api/v1/alerts` shows it ignored, and why.
    am.fire(&[gpu_ecc_uncorrectable("n99")]).await;
    let seen = eventually("n99's alert shown", Duration::from_secs(30), || async {
        let list: Value = reqwest::get(format!("{}/api/v1/alerts", hale.url))
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        list["alerts"]
            .as_array()?
            .iter()
            .find(|a| a["node"] == "n99")
            .cloned()
    })
    .await;
    assert!(
        seen["meaning"]
            .as_str()
            .unwrap()
            .starts_with("ignored: names n99, a node the orchestrator does not list"),
        "{seen}"
    );
    assert!(hale.node("n99").await.is_none());

    // An uncordon of a node Slurm runs already (resumed meanwhile by someone
    // else) is done: Slurm's "Invalid node state specified" is no trouble to retry.
    let adapter = slurm_adapter(&slurm).await;
    adapter.uncordon("n3").await.expect("already resumed: done");

    // The gate keeps the node's own weight in Slurm: lifted by an adapter that
    // never saw it ungated (hale restarted while the node was gated), it is back.
    let out = slurm.run("scontrol", &["update", "nodename=n3", "weight=10"]);
    assert!(out.status.success());
    adapter.inventory().await.unwrap();
    adapter.gate("n3", true).await.unwrap();
    assert_eq!(slurm.node("n3")["weight"], json!(1_000_000_010u64));
    let restarted = slurm_adapter(&slurm).await;
    let seen = restarted.inventory().await.unwrap().unwrap();
    let n3 = seen.iter().find(|o| o.id == "n3").unwrap();
    assert_eq!(n3.gated, Some(true));
    restarted.gate("n3", false).await.unwrap();
    assert_eq!(slurm.node("n3")["weight"], json!(10));

    // A name scontrol would read as several nodes (a host list, `ALL`) is
    // refused, never sent: no node's weight or state changes.
    for several in ["n[1-3]", "n2,n3", "ALL"] {
        let e = restarted.gate(several, true).await.unwrap_err();
        assert_eq!(e.metric_label(), "refused", "{several}: {e}");
        let e = restarted.cordon(several, "hale", "x").await.unwrap_err();
        assert_eq!(e.metric_label(), "refused", "{several}: {e}");
    }
    assert_eq!(slurm.node("n3")["weight"], json!(10));
    assert!(!drained(&slurm.node("n3")));
}

/// hale's Slurm adapter on `slurm`, as `hale serve` connects it.
async fn slurm_adapter(
    slurm: &SlurmCluster,
) -> std::sync::Arc<dyn hale::orchestrator::Orchestrator> {
    hale::slurm::Config {
        slurm_conf: Some(slurm.conf.clone()),
        timeout: Duration::from_secs(20),
        ..hale::slurm::Config::default()
    }
    .connect()
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn slurmctld_stopped_is_a_clear_error_and_nothing_is_done_until_it_is_back() {
    let mut slurm = SlurmCluster::start().await;
    let am = reporting().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 34 }}\n\
         orchestrator: {{ kind: slurm, slurmConf: {}, timeout: 10s }}\n",
        slurm.conf.display()
    );
    let mut hale = Hale::start(dir.path(), &am.url, &extra).await;
    hale.wait_node("inventory", "n1", |n| n["score"] == 100)
        .await;
    slurm.stop_ctld();
    am.fire(&[gpu_ecc_uncorrectable("n1")]).await;
    let mut said = None;
    for _ in 0..600 {
        said = hale
            .log()
            .lines()
            .find(|l| l.contains("inventory failed") && l.contains("sinfo --json"))
            .map(str::to_string);
        if said.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = hale.log();
    let tail: Vec<&str> = log.lines().rev().take(15).collect();
    let said = said.unwrap_or_else(|| panic!("the controller's absence not logged: {tail:#?}"));
    assert!(said.contains("inventory: `sinfo --json`"), "{said}");
    // Slurm answers with no nodes and an error: no node is taken for gone.
    let n2 = hale.events("n2", "").await;
    assert!(!n2.to_string().contains("NODE_DECOMMISSIONED"), "{n2}");
    // An operator's cordon meanwhile is recorded, and not claimed done: the CLI
    // waits, says so and exits 1; the node lists it pending, with why.
    let out = hale.cli(&["node", "cordon", "n1", "--reason", "ops", "--wait", "2s"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("n1: cordon recorded, not done yet"),
        "{stdout}"
    );
    assert!(
        stderr.contains("cordon of n1 not done within 2s"),
        "{stderr}"
    );
    let n1 = hale
        .wait_node("the failed try shown", "n1", |n| {
            n["pending"][0]["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("Unable to contact slurm controller"))
        })
        .await;
    assert_eq!(n1["pending"][0]["action"], "cordon", "{n1}");
    let show = hale.cli_ok(&["node", "show", "n1"]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains("Pending:   cordon (not done yet; the try at"),
        "{show}"
    );
    assert!(!drained(&slurm.node("n1")));
    // Restarted while Slurm cannot answer: the leader acts only once it has taken
    // an inventory in, and the cordon still pending says why it is not tried.
    hale.restart().await;
    let n1 = hale
        .wait_node("why the cordon waits", "n1", |n| {
            n["pending"][0]["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("inventory does not answer"))
        })
        .await;
    assert!(n1["pending"][0]["lastTry"].is_null(), "{n1}");
    let show = hale.cli_ok(&["node", "show", "n1"]);
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains("Pending:   cordon (not tried yet: the orchestrator's inventory does not answer: inventory: `sinfo --json`"),
        "{show}"
    );
    slurm.start_ctld();
    eventually(
        "n1 drained once slurmctld is back",
        Duration::from_secs(90),
        || async { drained(&slurm.node("n1")).then_some(()) },
    )
    .await;
    let back = eventually(
        "the inventory said to answer again",
        Duration::from_secs(30),
        || async {
            hale.log()
                .lines()
                .find(|l| l.contains("the orchestrator's inventory answers again"))
                .map(str::to_string)
        },
    )
    .await;
    let failed: u64 = back
        .split("failed=")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("how often it failed, said: {back}"));
    assert!(failed >= 1, "{back}");
    let n1 = hale
        .wait_node("nothing left pending", "n1", |n| n["pending"].is_null())
        .await;
    assert_eq!(n1["cordon"]["by"], "operator", "{n1}");
    let again = hale.cli_ok(&["node", "cordon", "n1", "--reason", "ops"]);
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.starts_with("n1 was cordoned by an operator already, for this reason"),
        "{again}"
    );
}

/// hale in cordon mode on `slurm` with `orchestrator.reboot` (no BMC), asked by an
/// operator to reboot n1; the Alertmanager and directory it runs on with it.
async fn reboot_n1(slurm: &SlurmCluster) -> (Alertmanager, tempfile::TempDir, Hale) {
    let am = reporting().await;
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "nodeHealth: {{ mode: cordon, maxUnavailablePercent: 100 }}\n\
         orchestrator: {{ kind: slurm, slurmConf: {}, timeout: 20s, reboot: true }}\n",
        slurm.conf.display()
    );
    let hale = Hale::start(dir.path(), &am.url, &extra).await;
    hale.wait_node("n1 listed", "n1", |n| n["score"] == 100)
        .await;
    let out = hale.cli(&["node", "reboot", "n1", "--reason", "test"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (am, dir, hale)
}

/// A reboot through Slurm (`orchestrator.reboot`, no BMC) leaves the node drained
/// once it is back: the flow verifies, then resumes it itself. Asked to resume on
/// its own (`nextstate=resume`, or `ASAP`, which implies it), Slurm would put it
/// back in service before the flow could verify, which hale reads as an
/// operator's uncordon, cancelling it.
#[tokio::test(flavor = "multi_thread")]
async fn a_slurm_reboot_leaves_the_node_drained_for_the_flow() {
    require("true");
    let slurm = SlurmCluster::start_with("RebootProgram=/bin/true\nResumeTimeout=600\n").await;
    let (_am, _dir, hale) = reboot_n1(&slurm).await;
    let shown = eventually(
        "the reboot asked of Slurm",
        Duration::from_secs(60),
        || async {
            let out = slurm.run("scontrol", &["show", "node", "n1"]);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.contains("REBOOT").then_some(text)
        },
    )
    .await;
    assert!(shown.contains("DRAIN"), "{shown}");
    assert!(!shown.contains("NextState=RESUME"), "{shown}");
    // The flow's history says Slurm rebooted it, not a BMC.
    let steps = eventually("the flow at return", Duration::from_secs(60), || async {
        let e = hale.events("n1", "type=REMEDIATION_STEP").await;
        let steps = e["events"].as_array().unwrap().clone();
        steps.iter().any(|s| s["step"] == "return").then_some(steps)
    })
    .await;
    for step in steps
        .iter()
        .filter(|s| ["reboot", "return"].contains(&s["step"].as_str().unwrap()))
    {
        let said = step["message"].as_str().unwrap();
        assert!(
            said.contains("orchestrator") && !said.contains("BMC read"),
            "{said}"
        );
    }
}

/// A reboot through Slurm (`orchestrator.reboot`, no BMC) is recorded as sent
/// before `scontrol reboot` runs, and a controller that cannot reboot (no
/// `RebootProgram` here) fails the flow at once, naming why — never sent again.
#[tokio::test(flavor = "multi_thread")]
async fn a_slurm_reboot_slurm_cannot_do_fails_the_flow_once() {
    let slurm = SlurmCluster::start().await;
    let (_am, _dir, hale) = reboot_n1(&slurm).await;
    let failed = eventually("the flow ended", Duration::from_secs(60), || async {
        let e = hale.events("n1", "type=REMEDIATION_FAILED").await;
        e["events"].as_array().unwrap().first().cloned()
    })
    .await;
    assert_eq!(failed["step"], "reboot", "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("RebootProgram"),
        "{failed}"
    );
    let log = hale.log();
    let tried = log
        .lines()
        .filter(|l| l.contains("action=\"reboot\" error="))
        .count();
    assert_eq!(tried, 1, "scontrol reboot tried {tried} times:\n{log}");
}

/// A NodeSet's name (`NodeSet=gpuset Feature=gpu`) is one word that `scontrol
/// update nodename=` reads as every node in the set: no verb sends it (an alert
/// taken in by `createFromAlerts` may name one), so no node changes. A drain an
/// operator made first is not taken over by hale's cordon; hale's own, asked
/// again, is as asked once; an operator's verb through hale drains over it.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodeset_name_is_never_sent_and_an_operators_drain_stays_theirs() {
    use hale::orchestrator::Class;
    let slurm = SlurmCluster::start_with("NodeSet=gpuset Feature=gpu\n").await;
    let adapter = slurm_adapter(&slurm).await;
    let weight = |n: &str| slurm.node(n)["weight"].clone();
    let weights: Vec<Value> = ["n1", "n2", "n3"].iter().map(|n| weight(n)).collect();
    let refused = [
        adapter
            .cordon("gpuset", "hale", "score below cordonBelow 60")
            .await,
        adapter.uncordon("gpuset").await,
        adapter.gate("gpuset", true).await,
        adapter.terminate("gpuset").await,
    ];
    for r in refused {
        let e = r.unwrap_err();
        assert_eq!(e.class, Class::Refused, "{e}");
        assert!(
            e.to_string().contains("Slurm shows no node `gpuset`"),
            "{e}"
        );
    }
    for (n, w) in ["n1", "n2", "n3"].iter().zip(&weights) {
        let node = slurm.node(n);
        assert!(!drained(&node), "{n} drained");
        assert_eq!(&node["weight"], w, "{n}'s weight");
    }

    let out = slurm.run(
        "scontrol",
        &["update", "nodename=n1", "state=drain", "reason=bios update"],
    );
    assert!(out.status.success());
    let e = adapter
        .cordon("n1", "hale", "score below cordonBelow 60")
        .await
        .unwrap_err();
    assert_eq!(e.class, Class::Refused, "{e}");
    assert!(
        e.to_string()
            .contains("node n1 was drained outside hale meanwhile (reason: bios update)"),
        "{e}"
    );
    assert_eq!(slurm.node("n1")["reason"], "bios update");

    for _ in 0..2 {
        adapter
            .cordon("n2", "hale", "score below cordonBelow 60")
            .await
            .unwrap();
    }
    assert_eq!(
        slurm.node("n2")["reason"],
        "hale: score below cordonBelow 60"
    );
    adapter.cordon("n2", "operator", "rack move").await.unwrap();
    assert_eq!(slurm.node("n2")["reason"], "operator: rack move");
}
