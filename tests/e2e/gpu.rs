//! GPU health from `hale collect gpu`, end to end: the collector run over the real
//! H200 report (`tests/gpu/`) and faulted variants of it, by an nvidia-smi stand-in
//! that prints them, hangs or fails as a lost GPU makes it; its textfile checked
//! by `promtool check metrics`, served by a real node_exporter, read by Prometheus
//! running the shipped rules, routed by Alertmanager to hale. An Xid the kernel
//! logs for the GPU's bus (mtail) is named after the GPU the collector listed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::harness::*;
use crate::monitoring::*;

const UUID: &str = "GPU-3c059e32-d2af-e569-c5ce-9601afee013c";

fn sample() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/gpu/h200-nvidia-smi-q.xml");
    std::fs::read_to_string(path).unwrap()
}

/// The H200 report with each `(from, to)` made once; every `from` must be in it.
fn faulted(edits: &[(&str, &str)]) -> String {
    let mut xml = sample();
    for (from, to) in edits {
        assert!(xml.contains(from), "the sample has no {from}");
        xml = xml.replacen(from, to, 1);
    }
    xml
}

const UNCORRECTABLE_ROWS: (&str, &str) = (
    "<remapped_row_unc>0</remapped_row_unc>",
    "<remapped_row_unc>2</remapped_row_unc>",
);
const REMAP_PENDING: (&str, &str) = (
    "<remapped_row_pending>No</remapped_row_pending>",
    "<remapped_row_pending>Yes</remapped_row_pending>",
);
const REMAP_FAILURE: (&str, &str) = (
    "<remapped_row_failure>No</remapped_row_failure>",
    "<remapped_row_failure>Yes</remapped_row_failure>",
);
const HW_SLOWDOWN: (&str, &str) = (
    "<clocks_event_reason_hw_slowdown>Not Active</clocks_event_reason_hw_slowdown>",
    "<clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>",
);

/// An nvidia-smi that does what the file `mode` in `dir` says: `hang` never
/// answers, `lost` fails as nvidia-smi does once a GPU has fallen off the bus,
/// anything else names the report (a file in `dir`) it prints.
fn fake_nvidia_smi(dir: &Path, mode: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("mode"), mode).unwrap();
    let d = dir.display();
    let script = format!(
        "#!/bin/sh\nmode=$(cat '{d}/mode')\ncase \"$mode\" in\n\
         hang) exec sleep 3600 ;;\n\
         lost) echo 'Unable to determine the device handle for GPU0000:00:06.0: Unknown Error'; exit 15 ;;\n\
         *) exec cat \"{d}/$mode\" ;;\nesac\n"
    );
    let path = dir.join("nvidia-smi");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn set_mode(nvidia_smi: &Path, mode: &str) {
    std::fs::write(nvidia_smi.with_file_name("mode"), mode).unwrap();
}

/// `hale collect gpu` once, to standard output.
fn collect_once(nvidia_smi: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hale"))
        .args([
            "collect",
            "gpu",
            "--timeout",
            "1s",
            "-o",
            "-",
            "--nvidia-smi",
        ])
        .arg(nvidia_smi)
        .output()
        .unwrap()
}

/// `promtool check metrics` on `text`: the exposition must parse and pass every
/// lint but one — the labels named as dcgm-exporter names them (`UUID`,
/// `modelName`) so the rules read either source, which the lint wants in
/// snake_case.
fn promtool_check_metrics(text: &str) {
    let out = run_with_input(
        Command::new(require("promtool")).args(["check", "metrics"]),
        text,
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let other: Vec<&str> = said
        .lines()
        .filter(|l| !l.ends_with("label names should be written in 'snake_case' not 'camelCase'"))
        .collect();
    assert!(
        other.is_empty() && matches!(out.status.code(), Some(0) | Some(3)),
        "promtool check metrics ({}): {said}\n{text}",
        out.status
    );
}

#[test]
fn the_collector_writes_valid_metrics_for_every_state_of_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_nvidia_smi(dir.path(), "report.xml");
    let labels = format!(
        "gpu=\"0\",UUID=\"{UUID}\",pci_bus_id=\"00000000:00:06.0\",device=\"nvidia0\",modelName=\"NVIDIA H200\""
    );
    // (the report, whether the run succeeds, a line the file must hold)
    let cases: Vec<(&str, String, bool, String)> = vec![
        (
            "healthy",
            sample(),
            true,
            format!("hale_gpu_remapped_rows_uncorrectable_total{{{labels}}} 0"),
        ),
        (
            "uncorrectable remapped rows",
            faulted(&[UNCORRECTABLE_ROWS]),
            true,
            format!("hale_gpu_remapped_rows_uncorrectable_total{{{labels}}} 2"),
        ),
        (
            "row remap failure",
            faulted(&[REMAP_FAILURE]),
            true,
            format!("hale_gpu_row_remap_failure{{{labels}}} 1"),
        ),
        (
            "row remap pending",
            faulted(&[REMAP_PENDING]),
            true,
            format!("hale_gpu_row_remap_pending{{{labels}}} 1"),
        ),
        (
            "HW slowdown active (and idle)",
            faulted(&[HW_SLOWDOWN]),
            true,
            format!("hale_gpu_clocks_event_reasons{{{labels}}} 9"),
        ),
        (
            "a GPU that errors out",
            faulted(&[(
                "<dram_uncorrectable>0</dram_uncorrectable>",
                "<dram_uncorrectable>Unknown Error</dram_uncorrectable>",
            )]),
            false,
            "hale_gpu_collector_success{error=\"gpu_error\"} 0".into(),
        ),
    ];
    for (name, report, succeeds, line) in cases {
        std::fs::write(dir.path().join("report.xml"), report).unwrap();
        let out = collect_once(&smi);
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            out.status.success(),
            succeeds,
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.lines().any(|l| l == line),
            "{name}: no {line} in\n{text}"
        );
        promtool_check_metrics(&text);
    }

    // nvidia-smi hangs (killed after --timeout), or fails as on a lost GPU.
    for (mode, error, says) in [
        ("hang", "timeout", "did not finish in 1s and was killed"),
        ("lost", "failed", "Unable to determine the device handle"),
    ] {
        set_mode(&smi, mode);
        let out = collect_once(&smi);
        let text = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode}: {text}");
        assert!(stderr.contains(says), "{mode}: {stderr}");
        let line = format!("hale_gpu_collector_success{{error=\"{error}\"}} 0");
        assert!(
            text.lines().any(|l| l == line),
            "{mode}: no {line} in\n{text}"
        );
        assert!(!text.contains("hale_gpu_info"), "{mode}: {text}");
        promtool_check_metrics(&text);
    }

    // No nvidia-smi on PATH: no driver, nothing to verdict on. A name of the
    // operator's own on no PATH directory is said as that name.
    let nothing = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hale"))
        .args(["collect", "gpu", "-o", "-"])
        .env("PATH", nothing.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("nvidia-smi is on no PATH directory: no NVIDIA driver here"),
        "{stderr}"
    );
    assert!(!text.contains("hale_gpu_collector_success"), "{text}");
    promtool_check_metrics(&text);
    let out = collect_once(Path::new("hale-no-such-nvidia-smi"));
    let text = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--nvidia-smi hale-no-such-nvidia-smi is on no PATH directory"),
        "{stderr}"
    );
    assert!(!text.contains("hale_gpu_collector_success"), "{text}");
    // A path given that is not there is the operator's mistake, said as one.
    let out = collect_once(&dir.path().join("no-such-nvidia-smi"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("hale_gpu_collector_success{error=\"failed\"} 0"),
        "{text}"
    );
}

/// `hale collect gpu --interval 1s` writing into a host's textfile directory.
struct Collector(Child);

impl Collector {
    fn start(nvidia_smi: &Path, textfiles: &Path, log: &Path) -> Collector {
        let child = Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(["collect", "gpu", "--interval", "1s", "--timeout", "2s"])
            .arg("--nvidia-smi")
            .arg(nvidia_smi)
            .arg("--output")
            .arg(textfiles.join("hale_gpu.prom"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        Collector(child)
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Stopped while nvidia-smi hangs, the collector takes it along rather than leave
/// it running behind it: a single run fails, saying so and writing nothing; one
/// repeating with `--interval` (a service being stopped) ends cleanly.
#[test]
fn a_stopped_collector_kills_the_nvidia_smi_it_runs() {
    for repeating in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let smi = dir.path().join("nvidia-smi");
        std::fs::write(
            &smi,
            format!(
                "#!/bin/sh\necho $$ > '{}.tmp'; mv '{0}.tmp' '{0}'\nexec sleep 3600\n",
                pid_file.display()
            ),
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let out = dir.path().join("hale_gpu.prom");
        let mut args = vec!["collect", "gpu", "--timeout", "1h", "--nvidia-smi"];
        args.push(smi.to_str().unwrap());
        args.extend(["-o", out.to_str().unwrap()]);
        if repeating {
            args.extend(["--interval", "30s"]);
        }
        let collector = Command::new(env!("CARGO_BIN_EXE_hale"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let smi_pid = loop {
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                break pid.trim().to_string();
            }
            assert!(std::time::Instant::now() < deadline, "nvidia-smi never ran");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let killed = Command::new("kill")
            .args(["-TERM", &collector.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let done = collector.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&done.stderr);
        assert_eq!(done.status.success(), repeating, "{stderr}");
        if !repeating {
            assert!(
                stderr.contains("stopped by SIGTERM before nvidia-smi answered"),
                "{stderr}"
            );
        }
        assert!(!out.exists(), "a file written for a run that never ended");
        let stat = format!("/proc/{smi_pid}/stat");
        let mut state = String::new();
        while std::time::Instant::now() < deadline {
            state = std::fs::read_to_string(&stat).unwrap_or_default();
            if state.is_empty() || state.contains(") Z ") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            state.is_empty() || state.contains(") Z "),
            "nvidia-smi lives on after the collector: {state}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_faults_read_by_the_collector_reach_hale_through_the_shipped_rules() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let Stage {
        hale_port,
        hale_url,
        am,
        hale_dir,
    } = Stage::set(dir).await;
    let hale_config = format!(
        "listen: 127.0.0.1:{hale_port}\napiTokenFile: {}\n\
         store: {{ path: {} }}\n\
         alertmanager: {{ url: '{}', pollInterval: 1s, staleAfter: 20s }}\n",
        hale_dir.join("token").display(),
        hale_dir.join("data").display(),
        am.url,
    );
    let hale = Hale::start_with(&hale_dir, hale_port, &hale_config).await;

    // gpu-a: its GPU's memory fails and it throttles, and the kernel logs an Xid
    // for its bus. gpu-b: nvidia-smi hangs.
    let gpu_a = Host::start("gpu-a", dir).await;
    let gpu_b = Host::start("gpu-b", dir).await;
    let kernel_a = KernelLog::start("gpu-a", dir).await;
    let smi_a = fake_nvidia_smi(&dir.join("smi-a"), "healthy.xml");
    let smi_b = fake_nvidia_smi(&dir.join("smi-b"), "healthy.xml");
    for smi in [&smi_a, &smi_b] {
        std::fs::write(smi.with_file_name("healthy.xml"), sample()).unwrap();
    }
    std::fs::write(
        smi_a.with_file_name("faulted.xml"),
        faulted(&[UNCORRECTABLE_ROWS, REMAP_PENDING, HW_SLOWDOWN]),
    )
    .unwrap();
    let _collect_a = Collector::start(&smi_a, &dir.join("gpu-a"), &dir.join("collect-a.log"));
    let _collect_b = Collector::start(&smi_b, &dir.join("gpu-b"), &dir.join("collect-b.log"));
    let prometheus = Prometheus::start(
        dir,
        &prometheus_config(dir, &am.url, &hale_url, &[&gpu_a, &gpu_b], &[&kernel_a]),
    )
    .await;

    // Healthy first: both report, and the GPU is known by its bus address.
    for id in ["gpu-a", "gpu-b"] {
        hale.wait_node_within("reporting", id, MINUTE, |n| n["score"] == 100)
            .await;
    }
    eventually("the H200 listed with its bus address", MINUTE, || async {
        let found = prometheus
            .query(r#"node_gpu:identity:group{node="gpu-a", pci_bus_id="00000000:00:06.0"}"#)
            .await;
        (found.len() == 1 && found[0]["metric"]["UUID"] == UUID).then_some(())
    })
    .await;
    eventually("mtail scraped twice", MINUTE, || async {
        let up = prometheus
            .query(r#"count_over_time(up{job="mtail"}[1m]) >= 2"#)
            .await;
        (up.len() == 1).then_some(())
    })
    .await;

    // A rise is measured against the count recorded before the last 5 minutes
    // (20 s here): wait until the healthy count is that old.
    eventually("the healthy count recorded 5 minutes back", MINUTE, || async {
        let before = prometheus
            .query(r#"last_over_time(node_gpu:remapped_rows_uncorrectable:total{node="gpu-a"}[1h] offset 20s)"#)
            .await;
        (before.len() == 1).then_some(())
    })
    .await;
    set_mode(&smi_a, "faulted.xml");
    set_mode(&smi_b, "hang");
    // The kernel spells the bus with a 4-digit domain and no function.
    let xid = kernel_a.keep_logging(
        "[ 8012.114466] NVRM: Xid (PCI:0000:00:06): 79, pid=1234, GPU has fallen off the bus.",
    );

    let a = hale
        .wait_node_within("gpu-a's four GPU conditions", "gpu-a", 2 * MINUTE, |n| {
            [
                "gpu_ecc_errors",
                "gpu_reset_required",
                "gpu_xid_errors",
                "gpu_throttling",
            ]
            .iter()
            .all(|c| condition(n, c).is_some())
        })
        .await;
    let ecc = condition(&a, "gpu_ecc_errors").unwrap();
    assert_eq!(ecc["reason"], "GpuRemappedRowsUncorrectable", "{a}");
    assert_eq!(ecc["severity"], "critical", "{a}");
    assert_eq!(ecc["sticky"], true, "{a}");
    let reset = condition(&a, "gpu_reset_required").unwrap();
    assert_eq!(reset["reason"], "GpuRowRemapPending", "{a}");
    let xid_message = condition(&a, "gpu_xid_errors").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        xid_message.contains(&format!(
            "Hardware Xid 79 on GPU 0 ({UUID}) at PCI 0000:00:06"
        )),
        "the Xid names the GPU: {xid_message}"
    );
    let throttling = condition(&a, "gpu_throttling").unwrap();
    assert!(
        throttling["message"]
            .as_str()
            .unwrap()
            .contains("hw_slowdown"),
        "{a}"
    );
    xid.store(false, std::sync::atomic::Ordering::Relaxed);

    // gpu-b: the hung nvidia-smi is killed at its timeout, the run says so, and
    // after GpuCollectorFailed's `for` the node's GPU health is unreadable.
    let b = hale
        .wait_node_within("gpu-b's collector failed", "gpu-b", 2 * MINUTE, |n| {
            condition(n, "collector_failed").is_some()
        })
        .await;
    assert_eq!(b["health"], "Unknown", "{b}");
    let written = std::fs::read_to_string(dir.join("gpu-b/hale_gpu.prom")).unwrap();
    assert!(
        written.contains("hale_gpu_collector_success{error=\"timeout\"} 0"),
        "{written}"
    );
    let said = std::fs::read_to_string(dir.join("collect-b.log")).unwrap();
    assert!(said.contains("was killed"), "{said}");
}
