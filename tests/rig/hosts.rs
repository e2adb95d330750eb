//! The two guests and the commands run in them. Booting is shell (`ci/rig-boot.sh`: vng, qemu,
//! the wire); each guest runs `ci/rig-agent.sh`, which runs the scripts dropped into its
//! directory (protocol in that script's header). Everything else is here.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const IP_A: &str = "198.18.0.1";
pub const IP_B: &str = "198.18.0.2";
/// The addresses on the second wire (rxe1 in both guests).
pub const IP2_A: &str = "198.18.1.1";
pub const IP2_B: &str = "198.18.1.2";

/// One of the two hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    A,
    B,
}

impl Node {
    pub fn ip(self) -> &'static str {
        match self {
            Node::A => IP_A,
            Node::B => IP_B,
        }
    }
    /// The address on the second wire.
    pub fn ip2(self) -> &'static str {
        match self {
            Node::A => IP2_A,
            Node::B => IP2_B,
        }
    }
    fn mac(self) -> &'static str {
        match self {
            Node::A => "52:54:00:12:34:01",
            Node::B => "52:54:00:12:34:02",
        }
    }
    fn mac2(self) -> &'static str {
        match self {
            Node::A => "52:54:00:12:35:01",
            Node::B => "52:54:00:12:35:02",
        }
    }
    fn i(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

/// A command run in a guest: its node and number there.
#[derive(Clone, Copy, Debug)]
pub struct Cmd {
    pub node: Node,
    n: u32,
}

/// How a command ended: its exit status, or still running at the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rc {
    Exit(i32),
    Hang,
}

impl Rc {
    pub fn ok(self) -> bool {
        self == Rc::Exit(0)
    }
    /// Ended, and not with 0.
    pub fn failed(self) -> bool {
        matches!(self, Rc::Exit(c) if c != 0)
    }
}

impl fmt::Display for Rc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rc::Exit(c) => write!(f, "{c}"),
            Rc::Hang => f.write_str("hang"),
        }
    }
}

#[derive(Default)]
struct Guest {
    dir: PathBuf,
    next: u32,
    boot: Option<Child>,
    qemu: Option<u32>,
}

/// The rig: two guests joined by two qemu socket netdevs on 127.0.0.1 (two wires: rxe0 on the
/// first, rxe1 on the second).
pub struct Rig {
    pub root: PathBuf,
    pub run: PathBuf,
    /// The rdmaxfer under test (each agent copies it when its guest boots).
    bin: PathBuf,
    /// The wires' TCP ports on 127.0.0.1.
    wire_ports: [u16; 2],
    boots: u32,
    guests: [Guest; 2],
}

pub fn log(msg: impl fmt::Display) {
    println!("[rig] {msg}");
}

/// Prints `text` line by line under `prefix`.
pub fn show(prefix: &str, text: &str) {
    for l in text.lines() {
        println!("  [{prefix}] {l}");
    }
}

fn tick() {
    std::thread::sleep(Duration::from_millis(100)); // poll interval of the agents' files
}

impl Rig {
    pub fn new(root: PathBuf, run: PathBuf, bin: PathBuf) -> Rig {
        // Free TCP ports on 127.0.0.1 for the wires (A's qemu listens, B's connects), both
        // bound at once so that they differ.
        let free = || std::net::TcpListener::bind("127.0.0.1:0").expect("a free port for a wire");
        let (l0, l1) = (free(), free());
        let port = |l: &std::net::TcpListener| l.local_addr().expect("its address").port();
        let wire_ports = [port(&l0), port(&l1)];
        drop((l0, l1));
        log(format!(
            "run dir {}; wires 127.0.0.1:{} and :{}",
            run.display(),
            wire_ports[0],
            wire_ports[1]
        ));
        Rig {
            root,
            run,
            bin,
            wire_ports,
            boots: 0,
            guests: Default::default(),
        }
    }

    /// `node`'s end of wire `w` (0 or 1) as a qemu socket netdev.
    fn netdev(&self, node: Node, w: usize) -> String {
        match node {
            Node::A => format!("listen=127.0.0.1:{}", self.wire_ports[w]),
            Node::B => format!("connect=127.0.0.1:{}", self.wire_ports[w]),
        }
    }

    /// Starts `node`'s guest in the background running the agent in a fresh directory.
    pub fn boot(&mut self, node: Node) {
        self.boots += 1;
        let dir = self.run.join(format!("{node}{}", self.boots));
        std::fs::create_dir_all(dir.join("cmd")).expect("agent dir");
        let netdev = self.netdev(node, 0);
        log(format!(
            "booting {node} ({}, {netdev}), agent dir {}",
            node.ip(),
            dir.display()
        ));
        let child = Command::new("bash")
            .arg(self.root.join("ci/rig-boot.sh"))
            .args([&node.to_string(), node.ip(), node.mac(), &netdev])
            .arg(&dir)
            .args([node.ip2(), node.mac2(), &self.netdev(node, 1)])
            .current_dir(&self.root)
            .env("RIG_BIN", &self.bin)
            .stdin(Stdio::null())
            .spawn()
            .expect("bash ci/rig-boot.sh");
        self.guests[node.i()] = Guest {
            dir,
            next: 1,
            boot: Some(child),
            qemu: None,
        };
    }

    fn alive(&mut self, node: Node) -> bool {
        match self.guests[node.i()].boot.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Waits for `node`'s agent and learns its qemu's pid (for host death).
    pub fn ready(&mut self, node: Node, secs: u64) -> bool {
        let f = self.guests[node.i()].dir.join("ready");
        let end = Instant::now() + Duration::from_secs(secs);
        while !f.exists() && Instant::now() < end && self.alive(node) {
            tick();
        }
        let said = std::fs::read_to_string(&f).unwrap_or_default();
        let console = std::fs::read_to_string(self.guests[node.i()].dir.join("console.log"))
            .unwrap_or_default();
        if !said.starts_with("ok") {
            let why = if said.is_empty() {
                format!("nothing after {secs} s")
            } else {
                said
            };
            log(format!("{node}: agent not ready: {}", why.trim()));
            let tail: Vec<&str> = console.lines().rev().take(40).collect();
            for l in tail.iter().rev() {
                println!("  [{node} console] {l}");
            }
            return false;
        }
        let needle = format!("id=s0,{} ", self.netdev(node, 0));
        self.guests[node.i()].qemu = qemu_pid(&needle);
        log(format!(
            "{node} ready: {}, qemu pid {:?}",
            said.trim(),
            self.guests[node.i()].qemu
        ));
        for l in console.lines().filter(|l| l.starts_with("[agent")) {
            println!("  {l}");
        }
        true
    }

    /// Whether both wires' sockets are in `state` ("listen", "established").
    fn wire_state(&self, state: &str) -> bool {
        self.wire_ports.iter().all(|p| {
            let mut c = Command::new("ss");
            c.arg("-Htn");
            if state == "listen" {
                c.arg("-l");
            } else {
                c.args(["state", state]);
            }
            c.arg(format!("sport = :{p}"))
                .output()
                .is_ok_and(|o| !String::from_utf8_lossy(&o.stdout).trim().is_empty())
        })
    }

    /// Waits until A's qemu listens on both wires' ports (B's qemu connects once only).
    pub fn wire_listening(&mut self, secs: u64) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end && self.alive(Node::A) {
            if self.wire_state("listen") {
                return true;
            }
            tick();
        }
        log(format!(
            "A's qemu never listened on 127.0.0.1:{} and :{}",
            self.wire_ports[0], self.wire_ports[1]
        ));
        false
    }

    /// Both qemu sockets are connected and B reaches A over each wire.
    pub fn wire_up(&mut self) -> bool {
        if !self.wire_state("listen") || !self.wire_state("established") {
            log(format!(
                "the wires 127.0.0.1:{} and :{} are not both connected",
                self.wire_ports[0], self.wire_ports[1]
            ));
            return false;
        }
        // No ping in the guest: a TCP connect to a closed port of A is answered by A's RST.
        [IP_A, IP2_A].iter().all(|ip| {
            let probe = format!(
                "timeout 10 bash -c 'exec 3<>/dev/tcp/{ip}/9' 2>&1 | grep -q 'Connection refused' && echo 'B reaches A at {ip} (RST from A)'"
            );
            self.run(Node::B, 30, &probe).1.ok()
        })
    }

    /// Host death: SIGKILL `node`'s qemu, then wait (bounded) for its boot script to end.
    pub fn kill_host(&mut self, node: Node) -> bool {
        let g = &mut self.guests[node.i()];
        let Some(pid) = g.qemu.take() else {
            log(format!("no qemu pid for {node}"));
            return false;
        };
        log(format!("killing {node}'s qemu (pid {pid})"));
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        if let Some(mut c) = g.boot.take() {
            let end = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < end {
                tick();
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        true
    }

    fn out(&self, c: Cmd, ext: &str) -> PathBuf {
        self.guests[c.node.i()]
            .dir
            .join("out")
            .join(format!("{}.{ext}", c.n))
    }

    /// Runs `script` (bash, with `ci/rig-guest.sh` sourced) in `node`'s guest, in the background.
    pub fn cmd(&mut self, node: Node, script: &str) -> Cmd {
        let g = &mut self.guests[node.i()];
        let n = g.next;
        g.next += 1;
        let guest_lib = self.root.join("ci/rig-guest.sh");
        let text = format!("source '{}'\n{script}\n", guest_lib.display());
        let tmp = g.dir.join("cmd").join(format!(".{n}.tmp"));
        std::fs::write(&tmp, text).expect("writing a command");
        std::fs::rename(&tmp, g.dir.join("cmd").join(format!("{n}.sh"))).expect("renaming it");
        Cmd { node, n }
    }

    /// The command's output so far.
    pub fn log_of(&self, c: Cmd) -> String {
        std::fs::read_to_string(self.out(c, "log")).unwrap_or_default()
    }

    fn rc_now(&self, c: Cmd) -> Option<Rc> {
        let s = std::fs::read_to_string(self.out(c, "rc")).ok()?;
        Some(Rc::Exit(s.trim().parse().unwrap_or(-1)))
    }

    /// Whether `node`'s guest died (its qemu is gone without [`kill_host`](Self::kill_host)):
    /// nothing runs there any more, so waits on it end at once.
    pub fn down(&self, node: Node) -> bool {
        self.guests[node.i()]
            .qemu
            .is_some_and(|p| !Path::new(&format!("/proc/{p}")).exists())
    }

    /// Whether the command has ended.
    pub fn ended(&self, c: Cmd) -> bool {
        self.out(c, "rc").exists()
    }

    /// Waits (at most `secs`) for the command's exit status; also returns the seconds waited.
    pub fn wait_rc(&self, c: Cmd, secs: u64) -> (Rc, u64) {
        let t0 = Instant::now();
        let end = t0 + Duration::from_secs(secs);
        loop {
            if let Some(rc) = self.rc_now(c) {
                return (rc, t0.elapsed().as_secs());
            }
            if Instant::now() >= end || self.down(c.node) {
                if self.down(c.node) {
                    log(format!("  {} is down: command {} never ends", c.node, c.n));
                }
                return (Rc::Hang, t0.elapsed().as_secs());
            }
            tick();
        }
    }

    /// `cmd` + `wait_rc`; shows the output.
    pub fn run(&mut self, node: Node, secs: u64, script: &str) -> (Cmd, Rc) {
        let c = self.cmd(node, script);
        let (rc, _) = self.wait_rc(c, secs);
        show(&node.to_string(), &self.log_of(c));
        (c, rc)
    }

    /// `run`, returning what the script printed.
    pub fn output(&mut self, node: Node, secs: u64, script: &str) -> String {
        let (c, _) = self.run(node, secs, script);
        self.log_of(c)
    }

    /// The last line `script` printed in `node` (empty if it failed to run).
    pub fn last_line(&mut self, node: Node, secs: u64, script: &str) -> String {
        let c = self.cmd(node, script);
        self.wait_rc(c, secs);
        self.log_of(c).lines().last().unwrap_or("").to_string()
    }

    /// Waits until the command's output has a line for which `pred` holds (false at its exit
    /// without one, or after `secs`).
    pub fn wait_log(&self, c: Cmd, what: &str, secs: u64, pred: impl Fn(&str) -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let ended = self.ended(c);
            let text = self.log_of(c);
            if text.lines().any(&pred) {
                return true;
            }
            if ended || Instant::now() >= end || self.down(c.node) {
                log(format!(
                    "  no {what} in the output of {}:{} within {secs} s; it says:",
                    c.node, c.n
                ));
                let tail: Vec<&str> = text.lines().rev().take(20).collect();
                for l in tail.iter().rev() {
                    println!("    {l}");
                }
                return false;
            }
            tick();
        }
    }

    /// Stops the agents, then makes sure no guest outlives the rig.
    pub fn stop(&mut self) {
        for g in &self.guests {
            if !g.dir.as_os_str().is_empty() {
                let _ = std::fs::write(g.dir.join("stop"), "");
            }
        }
        for (i, g) in self.guests.iter_mut().enumerate() {
            let Some(mut c) = g.boot.take() else { continue };
            let end = Instant::now() + Duration::from_secs(20);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < end {
                tick();
            }
            if matches!(c.try_wait(), Ok(None)) {
                log(format!("{} did not power off: killing it", ["A", "B"][i]));
                if let Some(pid) = g.qemu {
                    let _ = Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }

    pub fn agent_dir(&self, node: Node) -> &Path {
        &self.guests[node.i()].dir
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The pid of the qemu whose command line holds `needle`.
fn qemu_pid(needle: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("qemu-system-") {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let line: String = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if line.contains(needle) {
            return Some(pid);
        }
    }
    None
}
