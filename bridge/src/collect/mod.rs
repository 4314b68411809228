//! `hale collect`: node facts no exporter a site runs has, read from a local tool
//! and written as a node_exporter textfile (`--collector.textfile.directory`).
//! `gpu.rs` reads NVIDIA GPUs through `nvidia-smi`. Here: running the tool under a
//! deadline without ever piling up hung copies of it, and writing the file so the
//! exporter never reads half of it.

pub mod gpu;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;
use tokio::process::{Child, Command};

/// Why a tool gave no answer to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolFailure {
    /// It is not installed: a bare name found on no directory of `PATH`.
    Missing,
    /// It ran past the deadline and was killed; or a copy killed earlier has not
    /// exited yet (a process stuck in the kernel, as on a GPU that fell off the
    /// bus, cannot be killed), so no new copy was started.
    Timeout(String),
    /// It could not be started (a path given that does not exist among them).
    Failed(String),
    /// It exited with an error: what to say, and what it printed on standard
    /// output all the same.
    Exited { message: String, stdout: String },
    /// It printed more than [`MAX_OUTPUT`] and was killed: no report is that
    /// long (nvidia-smi's is some 30 KiB a GPU).
    TooLarge(String),
}

/// The most of what a failing tool said that its failure repeats, in characters.
const SAID: usize = 400;

/// The most a tool may print, on each of its outputs.
pub const MAX_OUTPUT: u64 = 64 << 20;

/// Runs one tool again and again, at most one copy at a time — across runs of
/// this process too, where `marker` names a file to remember a hung copy in.
pub struct Tool {
    program: PathBuf,
    args: Vec<String>,
    timeout: Duration,
    /// A copy killed at its deadline that has not exited yet.
    hung: Option<Child>,
    /// Holds the process id of a copy killed at its deadline, for the next run
    /// (a timer's next one-shot run, a restarted service) to find it lingering.
    marker: Option<PathBuf>,
}

impl Tool {
    pub fn new(program: PathBuf, args: &[&str], timeout: Duration) -> Tool {
        Tool {
            program,
            args: args.iter().map(|a| a.to_string()).collect(),
            timeout,
            hung: None,
            marker: None,
        }
    }

    /// Remember a hung copy in `marker` between runs.
    pub fn remembering_in(mut self, marker: PathBuf) -> Tool {
        self.marker = Some(marker);
        self
    }

    /// The command as an operator would type it.
    pub fn shown(&self) -> String {
        std::iter::once(self.program.display().to_string())
            .chain(self.args.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// A copy killed earlier that is still there, said as a timeout.
    fn lingering(&mut self) -> Option<ToolFailure> {
        let (shown, timeout) = (self.shown(), self.timeout.as_secs_f64());
        let still = |pid: u32| {
            format!(
                "`{shown}` killed after {timeout}s (process {pid}) has still not exited; no new copy started"
            )
        };
        if let Some(hung) = self.hung.as_mut() {
            match hung.try_wait() {
                Ok(None) => return Some(ToolFailure::Timeout(still(hung.id().unwrap_or(0)))),
                Ok(Some(_)) | Err(_) => self.hung = None,
            }
        }
        let marker = self.marker.as_ref()?;
        let pid = std::fs::read_to_string(marker)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())?;
        // The same program, not another process that got its id since.
        let name = self
            .program
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        let alive = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|cmd| String::from_utf8_lossy(&cmd).contains(name.as_ref()));
        if alive {
            return Some(ToolFailure::Timeout(still(pid)));
        }
        let _ = std::fs::remove_file(marker);
        None
    }

    /// Run the tool; its standard output when it exits successfully.
    pub async fn run(&mut self) -> Result<String, ToolFailure> {
        if let Some(lingering) = self.lingering() {
            return Err(lingering);
        }
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a wrapper script's children die with it.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| match e.kind() {
                // A bare name on no PATH directory: not installed. A path the
                // operator gave that is not there is their mistake to hear about.
                std::io::ErrorKind::NotFound if self.program.components().count() == 1 => {
                    ToolFailure::Missing
                }
                _ => ToolFailure::Failed(format!("cannot run `{}`: {e}", self.shown())),
            })?;
        let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let group = child.id();
        // A run given up on (its caller stopped) takes the tool's whole group, and
        // remembers it as a killed copy is remembered: one stuck in the kernel
        // does not die, and the next run must not start beside it.
        let mut unfinished = Unfinished {
            group,
            marker: self.marker.clone(),
        };
        let finished = tokio::time::timeout(self.timeout, async {
            // Both pipes read while waiting: a report larger than a pipe's buffer
            // would otherwise block the tool forever.
            let (_, _, status) = tokio::join!(
                read_all(stdout.as_mut(), &mut out, group),
                read_all(stderr.as_mut(), &mut err, group),
                child.wait()
            );
            status
        })
        .await;
        let status = match finished {
            Ok(status) => {
                unfinished.group = None;
                status
            }
            // Past its deadline: killed with its group and remembered, as a run
            // given up on is.
            Err(_) => {
                drop(unfinished);
                let _ = child.start_kill();
                self.hung = Some(child);
                return Err(ToolFailure::Timeout(format!(
                    "`{}` did not finish in {}s and was killed",
                    self.shown(),
                    self.timeout.as_secs_f64()
                )));
            }
        };
        let status = status
            .map_err(|e| ToolFailure::Failed(format!("waiting for `{}`: {e}", self.shown())))?;
        if [&out, &err].iter().any(|o| o.len() as u64 > MAX_OUTPUT) {
            return Err(ToolFailure::TooLarge(format!(
                "`{}` printed more than {} MiB and was killed",
                self.shown(),
                MAX_OUTPUT >> 20
            )));
        }
        let stdout = String::from_utf8_lossy(&out).into_owned();
        if status.success() {
            return Ok(stdout);
        }
        // nvidia-smi says what went wrong on standard output as often as on error;
        // a report it printed all the same is read on its own, not said here.
        let printed = if stdout.contains('<') {
            ""
        } else {
            stdout.as_str()
        };
        let mut said = [String::from_utf8_lossy(&err).as_ref(), printed]
            .join(" ")
            .split_whitespace()
            .take(60)
            .collect::<Vec<_>>()
            .join(" ");
        // Sixty words, and no more than a line's worth of them.
        if let Some((cut, _)) = said.char_indices().nth(SAID) {
            said.truncate(cut);
            said.push('…');
        }
        let said = if said.is_empty() {
            String::new()
        } else {
            format!(": {said}")
        };
        Err(ToolFailure::Exited {
            message: format!("`{}` exited with {status}{said}", self.shown()),
            stdout,
        })
    }
}

/// The process group of a tool still running, killed when this goes with the run
/// and remembered in `marker`.
struct Unfinished {
    group: Option<u32>,
    marker: Option<PathBuf>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(group) = self.group {
            kill_group(group);
            if let Some(marker) = &self.marker {
                let _ = std::fs::write(marker, format!("{group}\n"));
            }
        }
    }
}

/// SIGKILL to the process group `pid` leads.
fn kill_group(pid: u32) {
    const SIGKILL: i32 = 9;
    unsafe extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    let Ok(group) = i32::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) only sends a signal; a negative pid names the group this
    // process created for the child (process_group(0)), so nothing else is hit.
    unsafe {
        kill(-group, SIGKILL);
    }
}

/// Read `pipe` to its end, or to past [`MAX_OUTPUT`]: then the tool's process
/// `group` is killed, or it would block writing the rest until its deadline.
async fn read_all<R: tokio::io::AsyncRead + Unpin>(
    pipe: Option<&mut R>,
    into: &mut Vec<u8>,
    group: Option<u32>,
) {
    if let Some(pipe) = pipe {
        let _ = pipe.take(MAX_OUTPUT + 1).read_to_end(into).await;
        if let Some(group) = group.filter(|_| into.len() as u64 > MAX_OUTPUT) {
            kill_group(group);
        }
    }
}

/// Where the metrics go: a textfile, replaced atomically, or standard output.
#[derive(Debug, Clone)]
pub enum Output {
    Stdout,
    Textfile(PathBuf),
}

impl Output {
    /// `-` is standard output; anything else a `.prom` file (node_exporter reads
    /// no other name) in a directory that exists.
    pub fn parse(text: &str) -> Result<Output, String> {
        if text == "-" {
            return Ok(Output::Stdout);
        }
        let path = PathBuf::from(text);
        if path.extension().is_none_or(|e| e != "prom") {
            return Err(format!(
                "{text}: node_exporter's textfile collector reads only files named *.prom"
            ));
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if dir.is_some_and(|d| !d.is_dir()) {
            return Err(format!("{text}: its directory does not exist"));
        }
        Ok(Output::Textfile(path))
    }

    /// Write `text` whole: to a hidden temporary file beside the target (a name
    /// the textfile collector skips), flushed to disk, then renamed over it.
    pub fn write(&self, text: &str) -> std::io::Result<()> {
        match self {
            Output::Stdout => std::io::stdout().write_all(text.as_bytes()),
            Output::Textfile(path) => replace(path, text),
        }
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Output::Stdout => f.write_str("standard output"),
            Output::Textfile(path) => write!(f, "{}", path.display()),
        }
    }
}

fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Temporary files a run killed halfway through left behind.
    let stale = format!(".{name}.");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.starts_with(&stale) && file.ends_with(".tmp") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let tmp = dir.join(format!("{stale}{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself on disk, so a crash after it cannot bring the old
        // file back.
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

impl Output {
    /// Where a [`Tool`] writing here remembers a hung copy between runs: a hidden
    /// file beside the textfile; none for standard output.
    pub fn marker(&self, tool: &str) -> Option<PathBuf> {
        match self {
            Output::Stdout => None,
            Output::Textfile(path) => {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                Some(path.with_file_name(format!(".{name}.{tool}.hung")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(dir: &Path, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let path = dir.join("tool");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Run a tool of `body` with `args`, which must exit failing: its message and
    /// what it printed on standard output.
    async fn failure(body: &str, args: &[&str]) -> (String, String) {
        let dir = tempfile::tempdir().unwrap();
        let mut tool = Tool::new(script(dir.path(), body), args, Duration::from_secs(20));
        let ToolFailure::Exited { message, stdout } = tool.run().await.unwrap_err() else {
            panic!("not a failure")
        };
        (message, stdout)
    }

    /// Wait for process `pid` to end (killed, it may linger a moment as a zombie
    /// of init), failing as `what` living on after 5 s.
    async fn ends(pid: &str, what: &str) {
        let stat = format!("/proc/{pid}/stat");
        let mut state = String::new();
        for _ in 0..250 {
            state = std::fs::read_to_string(&stat).unwrap_or_default();
            if state.is_empty() || state.contains(") Z ") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{what} lives on: {state}");
    }

    #[tokio::test]
    async fn a_large_answer_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        // 1 MiB, far more than a pipe holds.
        let mut tool = Tool::new(
            script(dir.path(), "head -c 1048576 /dev/zero | tr '\\0' x"),
            &[],
            Duration::from_secs(20),
        );
        assert_eq!(tool.run().await.unwrap().len(), 1 << 20);
    }

    #[tokio::test]
    async fn a_failure_says_the_status_and_what_the_tool_printed() {
        let (message, stdout) = failure("echo 'No devices were found'; exit 6", &["-q"]).await;
        assert_eq!(stdout, "No devices were found\n");
        assert!(message.contains("exit status: 6"), "{message}");
        assert!(message.contains("No devices were found"), "{message}");
        assert!(message.contains("tool -q"), "{message}");
    }

    /// A report printed before the failure is read on its own: the message
    /// says the status and what the tool said on error, not the report again.
    #[tokio::test]
    async fn a_failure_leaves_the_report_it_printed_out_of_its_message() {
        let (message, stdout) = failure(
            "echo '<?xml version=\"1.0\" ?><nvidia_smi_log></nvidia_smi_log>'; echo 'Unable to determine the device handle' >&2; exit 15",
            &[],
        )
        .await;
        assert!(stdout.contains("<nvidia_smi_log>"), "{stdout}");
        assert!(
            message.ends_with("exit status: 15: Unable to determine the device handle"),
            "{message}"
        );
    }

    /// What a failing tool said is repeated a line's worth at most.
    #[tokio::test]
    async fn a_failure_repeats_a_line_of_what_was_said() {
        let (message, _) = failure("head -c 100000 /dev/zero | tr '\\0' x >&2; exit 9", &[]).await;
        assert!(message.ends_with("xxx…"), "{message}");
        assert!(message.chars().count() < 500, "{} chars", message.len());
    }

    /// An answer without end is cut at [`MAX_OUTPUT`] and the tool killed there,
    /// not read until memory runs out or the deadline.
    #[tokio::test]
    async fn an_answer_without_end_is_too_large() {
        let dir = tempfile::tempdir().unwrap();
        let mut tool = Tool::new(
            script(dir.path(), "exec yes '<a>'"),
            &[],
            Duration::from_secs(120),
        );
        let ToolFailure::TooLarge(message) = tool.run().await.unwrap_err() else {
            panic!("not too large")
        };
        assert!(message.contains("more than 64 MiB"), "{message}");
    }

    /// A run its caller gives up on (a SIGTERM to `hale collect`) takes the tool's
    /// whole process group with it.
    #[tokio::test]
    async fn a_run_given_up_on_kills_the_tool() {
        let dir = tempfile::tempdir().unwrap();
        let child_pid = dir.path().join("child");
        let marker = dir.path().join(".hale_gpu.prom.tool.hung");
        let mut tool = Tool::new(
            script(
                dir.path(),
                &format!("sleep 60 & echo $! > {}; wait", child_pid.display()),
            ),
            &[],
            Duration::from_secs(120),
        )
        .remembering_in(marker.clone());
        let pid = tokio::select! {
            _ = tool.run() => panic!("the tool ended on its own"),
            pid = async {
                loop {
                    match std::fs::read_to_string(&child_pid).map(|t| t.trim().to_string()) {
                        Ok(pid) if !pid.is_empty() => break pid,
                        _ => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            } => pid,
        };
        ends(&pid, "the tool's child").await;
        // Remembered as a killed copy is, should it not die.
        let remembered = std::fs::read_to_string(&marker).unwrap();
        assert!(remembered.trim().parse::<u32>().is_ok(), "{remembered}");
    }

    #[tokio::test]
    async fn a_tool_on_no_path_is_missing_but_a_missing_path_given_is_an_error() {
        let mut bare = Tool::new("hale-no-such-tool".into(), &[], Duration::from_secs(1));
        assert_eq!(bare.run().await.unwrap_err(), ToolFailure::Missing);
        let mut given = Tool::new(
            "/nonexistent/nvidia-smi".into(),
            &[],
            Duration::from_secs(1),
        );
        let ToolFailure::Failed(message) = given.run().await.unwrap_err() else {
            panic!("a path given that does not exist read as not installed")
        };
        assert!(
            message.contains("cannot run `/nonexistent/nvidia-smi`"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_hung_tool_is_killed_with_its_children_and_not_started_again_while_it_lingers() {
        let dir = tempfile::tempdir().unwrap();
        let started = dir.path().join("started");
        let child_pid = dir.path().join("child");
        let marker = dir.path().join(".hale_gpu.prom.tool.hung");
        // A wrapper script whose own child hangs, and which ignores SIGTERM as a
        // process stuck in the kernel ignores everything; SIGKILL to its group
        // ends both.
        let program = script(
            dir.path(),
            &format!(
                "trap '' TERM; echo x >> {}; sleep 30 & echo $! > {}; wait",
                started.display(),
                child_pid.display()
            ),
        );
        let mut tool = Tool::new(program.clone(), &[], Duration::from_millis(500))
            .remembering_in(marker.clone());
        let ToolFailure::Timeout(first) = tool.run().await.unwrap_err() else {
            panic!("not a timeout")
        };
        assert!(first.contains("was killed"), "{first}");
        let runs = || std::fs::read_to_string(&started).unwrap().lines().count();
        assert_eq!(runs(), 1);
        let hung = tool.hung.as_mut().expect("the killed copy is kept");
        let leader = hung.id().unwrap();
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap().trim(),
            leader.to_string(),
            "the killed copy is remembered for the next run"
        );
        hung.wait().await.unwrap();
        let grandchild = std::fs::read_to_string(&child_pid).unwrap();
        ends(grandchild.trim(), "the wrapper's child").await;

        // A copy that does not die (stuck in the kernel, as the killed one would
        // be on a GPU that fell off the bus): no second copy is started beside it —
        // nor by another run of the collector, which finds it through the marker.
        let mut stuck = Command::new(&program);
        stuck.kill_on_drop(true);
        let mut stuck = stuck.spawn().unwrap();
        while runs() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        std::fs::write(&marker, format!("{}\n", stuck.id().unwrap())).unwrap();
        tool.hung = None;
        let mut next_run = Tool::new(program.clone(), &[], Duration::from_millis(500))
            .remembering_in(marker.clone());
        for tool in [&mut tool, &mut next_run] {
            let ToolFailure::Timeout(lingering) = tool.run().await.unwrap_err() else {
                panic!("not a timeout")
            };
            assert!(lingering.contains("has still not exited"), "{lingering}");
        }
        assert_eq!(runs(), 2, "only the stuck copy itself ran");

        // Once it is gone, the next run starts a fresh copy and forgets the marker
        // until that one hangs in turn.
        stuck.start_kill().unwrap();
        stuck.wait().await.unwrap();
        assert!(matches!(
            next_run.run().await.unwrap_err(),
            ToolFailure::Timeout(m) if m.contains("was killed")
        ));
        assert_eq!(runs(), 3);
    }

    #[test]
    fn the_textfile_is_replaced_whole_and_only_prom_files_are_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hale_gpu.prom");
        let out = Output::parse(path.to_str().unwrap()).unwrap();
        // A temporary file a killed run left behind goes with the next write.
        std::fs::write(dir.path().join(".hale_gpu.prom.999999.tmp"), "half").unwrap();
        out.write("a 1\n").unwrap();
        out.write("b 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b 2\n");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");

        let wrong = Output::parse(dir.path().join("gpu.txt").to_str().unwrap()).unwrap_err();
        assert!(wrong.contains("*.prom"), "{wrong}");
        let nowhere = Output::parse("/nonexistent/dir/gpu.prom").unwrap_err();
        assert!(nowhere.contains("does not exist"), "{nowhere}");
        assert!(matches!(Output::parse("-"), Ok(Output::Stdout)));
    }
}
