//! The seeded, deterministic simulator's frame (docs/RELIABILITY.md): a virtual clock, an event
//! queue, a simulated network of FIFO links, a seeded random source, the seed runner and the
//! shrinker. A *world* (one module per set of protocol cores: `ownership.rs`, `sessions.rs`,
//! `relocation.rs`) owns the nodes and drives the real sans-IO cores with the events this frame
//! delivers; the frame knows nothing about what the messages mean. Each world implements
//! [`World`], and the test drivers (`tests/sim_*.rs`) run it through the frame's one seed run,
//! fault switch, shrinker, failure report and replay ([`check_seeds`], [`fault_from_env`],
//! [`shrunk`], [`report`], [`replay`]).
//!
//! Determinism: every choice comes from [`Rng`] or [`mix`] of the seed; every collection a
//! world iterates is ordered (`BTreeMap`, `Vec`); time is the virtual [`Millis`] only. The same
//! seed therefore replays the same run, event for event.
//!
//! Network model (TCP between processes, as the mesh's links are): a link is one direction
//! between two endpoints; it delivers in order (never reordered within it), with a delay drawn
//! per message; links are independent, so records on different links reorder freely. A link
//! loses messages only when it breaks: a partition or a crash of either end bumps its epoch and
//! everything in flight on it is dropped at delivery (a broken TCP connection), as is every
//! send while the partition lasts.

#![allow(dead_code)]

pub mod ownership;
pub mod relocation;
pub mod sessions;

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Virtual time in milliseconds since the start of a run.
pub type Millis = u64;

/// SplitMix64: small, fast, and fully determined by its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x005E_ED0F_5EED)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0, 0)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `permille`/1000.
    pub fn chance(&mut self, permille: u64) -> bool {
        self.below(1000) < permille
    }
}

/// A stateless hash of two values (the SplitMix64 finaliser): per-message choices drawn from
/// it depend only on the seed and the message's place on its link, so removing an unrelated
/// action while shrinking does not move every later delay.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Scheduled<E> {
    at: Millis,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Earliest first (BinaryHeap is a max-heap); ties in scheduling order.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The event queue: events come out by time, ties in the order they were scheduled.
pub struct Queue<E> {
    heap: BinaryHeap<Scheduled<E>>,
    seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E> Queue<E> {
    /// Schedules `event` at `at`.
    pub fn push(&mut self, at: Millis, event: E) {
        self.seq += 1;
        self.heap.push(Scheduled {
            at,
            seq: self.seq,
            event,
        });
    }

    /// The next event, if its time is at or before `until`.
    pub fn pop_until(&mut self, until: Millis) -> Option<(Millis, E)> {
        if self.heap.peek()?.at > until {
            return None;
        }
        self.heap.pop().map(|s| (s.at, s.event))
    }
}

/// A network endpoint: a node process (by index) or the Location Store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ep {
    /// Node `i`.
    Node(usize),
    /// The Location Store (one server / file for the mesh).
    Store,
}

impl std::fmt::Display for Ep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ep::Node(i) => write!(f, "n{i}"),
            Ep::Store => f.write_str("store"),
        }
    }
}

#[derive(Default)]
struct Link {
    epoch: u64,
    /// Delivery time of the last message sent on the link (FIFO: never before it).
    last_at: Millis,
    sent: u64,
}

/// The delay model of one run.
#[derive(Clone, Copy, Debug)]
pub struct Delays {
    /// Every message takes `1..=base_ms` ms.
    pub base_ms: u64,
    /// Per mille of messages that meet a slow link (a retransmission, a stalled peer).
    pub slow_permille: u64,
    /// A slow message takes up to this much longer.
    pub slow_ms: u64,
}

/// A message in flight: where it goes and the link epoch it was sent in.
#[derive(Debug)]
pub struct Envelope<M> {
    /// Sender.
    pub from: Ep,
    /// Receiver.
    pub to: Ep,
    epoch: u64,
    /// The message.
    pub msg: M,
}

/// The simulated network.
pub struct Network {
    seed: u64,
    delays: Delays,
    links: BTreeMap<(Ep, Ep), Link>,
    cut: BTreeSet<(Ep, Ep)>,
    /// Messages dropped (sent on a cut link, or in flight when their link broke).
    pub dropped: u64,
}

fn pair(a: Ep, b: Ep) -> (Ep, Ep) {
    if a <= b { (a, b) } else { (b, a) }
}

impl Network {
    /// A network of `seed` with `delays`.
    pub fn new(seed: u64, delays: Delays) -> Self {
        Self {
            seed,
            delays,
            links: BTreeMap::new(),
            cut: BTreeSet::new(),
            dropped: 0,
        }
    }

    /// Sends `msg` at `now`: the delivery time and envelope, or `None` when the link is cut.
    pub fn send<M>(
        &mut self,
        now: Millis,
        from: Ep,
        to: Ep,
        msg: M,
    ) -> Option<(Millis, Envelope<M>)> {
        if self.cut.contains(&pair(from, to)) {
            self.dropped += 1;
            return None;
        }
        let link = self.links.entry((from, to)).or_default();
        link.sent += 1;
        let key = mix(
            self.seed,
            mix(ep_code(from), ep_code(to)).wrapping_add(link.sent),
        );
        let mut delay = 1 + key % self.delays.base_ms.max(1);
        if mix(key, 1) % 1000 < self.delays.slow_permille {
            delay += mix(key, 2) % self.delays.slow_ms.max(1);
        }
        let at = (now + delay).max(link.last_at);
        link.last_at = at;
        Some((
            at,
            Envelope {
                from,
                to,
                epoch: link.epoch,
                msg,
            },
        ))
    }

    /// Whether `env` may be delivered (its link did not break since it was sent); counts a drop
    /// otherwise.
    pub fn accept<M>(&mut self, env: &Envelope<M>) -> bool {
        let ok = self
            .links
            .get(&(env.from, env.to))
            .is_some_and(|l| l.epoch == env.epoch);
        if !ok {
            self.dropped += 1;
        }
        ok
    }

    fn break_link(&mut self, from: Ep, to: Ep) {
        let l = self.links.entry((from, to)).or_default();
        l.epoch += 1;
    }

    /// Cuts `a`–`b` both ways until [`Network::heal`]: what is in flight is lost.
    pub fn partition(&mut self, a: Ep, b: Ep) {
        self.cut.insert(pair(a, b));
        self.break_link(a, b);
        self.break_link(b, a);
    }

    /// Stalls `a`–`b` both ways until `until` without breaking the connections (an outage
    /// shorter than the peer timeout: TCP retransmits): every message sent meanwhile is
    /// delivered at `until` or later, still in order on its link.
    pub fn stall(&mut self, a: Ep, b: Ep, until: Millis) {
        for (from, to) in [(a, b), (b, a)] {
            let l = self.links.entry((from, to)).or_default();
            l.last_at = l.last_at.max(until);
        }
    }

    /// Ends the partition of `a`–`b`.
    pub fn heal(&mut self, a: Ep, b: Ep) {
        self.cut.remove(&pair(a, b));
    }

    /// Ends every partition.
    pub fn heal_all(&mut self) {
        self.cut.clear();
    }

    /// Whether `a`–`b` is cut.
    pub fn is_cut(&self, a: Ep, b: Ep) -> bool {
        self.cut.contains(&pair(a, b))
    }

    /// `ep` crashed: every connection to and from it breaks.
    pub fn reset(&mut self, ep: Ep) {
        let keys: Vec<(Ep, Ep)> = self
            .links
            .keys()
            .filter(|(a, b)| *a == ep || *b == ep)
            .copied()
            .collect();
        for (a, b) in keys {
            self.break_link(a, b);
        }
    }
}

fn ep_code(ep: Ep) -> u64 {
    match ep {
        Ep::Node(i) => i as u64 + 1,
        Ep::Store => 0,
    }
}

/// An invariant that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Virtual time of the step after which it was found.
    pub at: Millis,
    /// What did not hold.
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "t={}ms: {}", self.at, self.what)
    }
}

/// Seeds `start..start + count` on `threads` threads: how many ran and the smallest failing
/// seed with its violation. `run` must be deterministic in its seed.
pub fn run_seeds<F>(
    start: u64,
    count: u64,
    threads: usize,
    run: F,
) -> (u64, Option<(u64, Violation)>)
where
    F: Fn(u64) -> Option<Violation> + Sync,
{
    let next = std::sync::atomic::AtomicU64::new(start);
    let ran = std::sync::atomic::AtomicU64::new(0);
    let first: std::sync::Mutex<Option<(u64, Violation)>> = std::sync::Mutex::new(None);
    let end = start.saturating_add(count);
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if seed >= end {
                        return;
                    }
                    if first
                        .lock()
                        .unwrap()
                        .as_ref()
                        .is_some_and(|(f, _)| *f < seed)
                    {
                        return;
                    }
                    ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Some(v) = run(seed) {
                        let mut f = first.lock().unwrap();
                        if f.as_ref().is_none_or(|(s, _)| seed < *s) {
                            *f = Some((seed, v));
                        }
                    }
                }
            });
        }
    });
    (ran.into_inner(), first.into_inner().unwrap())
}

/// Delta debugging over a failing input: removes chunks of `items` (halves, then quarters, …,
/// then single items) while `fails` still holds, at most `budget` tries. Returns a list on
/// which `fails` holds, no longer than the input.
pub fn shrink<A: Clone>(
    items: Vec<A>,
    budget: usize,
    mut fails: impl FnMut(&[A]) -> bool,
) -> Vec<A> {
    let mut cur = items;
    let mut tries = 0;
    let mut chunk = cur.len().div_ceil(2).max(1);
    loop {
        let mut progress = false;
        let mut i = 0;
        while i < cur.len() {
            if tries >= budget {
                return cur;
            }
            let end = (i + chunk).min(cur.len());
            let mut candidate = cur[..i].to_vec();
            candidate.extend_from_slice(&cur[end..]);
            tries += 1;
            if fails(&candidate) {
                cur = candidate;
                progress = true;
            } else {
                i = end;
            }
        }
        if !progress {
            if chunk == 1 {
                return cur;
            }
            chunk = chunk.div_ceil(2);
        }
    }
}

/// Seeds for a test run: `SIM_SEEDS` (count) and `SIM_START` (first seed) from the
/// environment, else the defaults.
pub fn seeds_from_env(default_count: u64) -> (u64, u64) {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    (
        var("SIM_START").unwrap_or(0),
        var("SIM_SEEDS").unwrap_or(default_count),
    )
}

/// Threads for a seed run: `SIM_THREADS`, else the machine's parallelism.
pub fn threads_from_env() -> usize {
    std::env::var("SIM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Milliseconds of `d`, rounded up.
pub fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_micros().div_ceil(1000)).unwrap_or(u64::MAX)
}

/// Milliseconds from `base` to `at` (0 if before), rounded down.
pub fn ms_since(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_millis()).unwrap_or(u64::MAX)
}

/// A run's result, in every world.
#[derive(Debug)]
pub struct Outcome<S> {
    /// The first invariant that did not hold.
    pub violation: Option<Violation>,
    /// The event trace (when asked for).
    pub trace: Vec<String>,
    /// What happened.
    pub stats: S,
}

/// A world as the seed runner, the shrinker and the replay see it: a scenario generated from a
/// seed (a list of timed actions the shrinker removes from), the driver rules that can be
/// switched off (`SIM_FAULT`), and a deterministic run.
pub trait World {
    /// The world's name (`scripts/sim --world NAME`, the test binary `sim_NAME`).
    const NAME: &'static str;
    /// A run's input: everything the seed decides.
    type Scenario: Clone;
    /// One scheduled action.
    type Action: Clone + Debug;
    /// Driver rules that can be switched off.
    type Faults: Copy + Debug + Default + Send + Sync;
    /// What a run counted.
    type Stats: Copy + Debug + Default + Send + std::ops::AddAssign;

    /// The scenario of `seed`.
    fn generate(seed: u64) -> Self::Scenario;
    /// The scenario's actions by time.
    fn actions(s: &Self::Scenario) -> &[(Millis, Self::Action)];
    /// `s` with only `actions`.
    fn with_actions(s: &Self::Scenario, actions: Vec<(Millis, Self::Action)>) -> Self::Scenario;
    /// The fault named `name`, or none for an empty name; `None` for an unknown one.
    fn fault_named(name: &str) -> Option<Self::Faults>;
    /// Runs `s` with `faults`; `trace` records every event.
    fn run(s: &Self::Scenario, faults: Self::Faults, trace: bool) -> Outcome<Self::Stats>;
}

/// The fault `SIM_FAULT` names (none when unset).
pub fn fault_from_env<W: World>() -> W::Faults {
    let name = std::env::var("SIM_FAULT").unwrap_or_default();
    W::fault_named(&name)
        .unwrap_or_else(|| panic!("unknown SIM_FAULT {name:?} for the {} world", W::NAME))
}

/// The shortest scenario of `seed` that still fails under `faults` (delta debugging over its
/// actions).
pub fn shrunk<W: World>(seed: u64, faults: W::Faults) -> W::Scenario {
    let full = W::generate(seed);
    let actions = shrink(W::actions(&full).to_vec(), 3_000, |acts| {
        W::run(&W::with_actions(&full, acts.to_vec()), faults, false)
            .violation
            .is_some()
    });
    W::with_actions(&full, actions)
}

/// How to replay a failing seed, its shrunk actions and the shrunk run's trace.
pub fn report<W: World>(seed: u64, faults: W::Faults, v: &Violation) -> String {
    let s = shrunk::<W>(seed, faults);
    let out = W::run(&s, faults, true);
    let mut text = format!(
        "seed {seed} violates: {v}\nreplay: scripts/sim --world {} --seed {seed} \
         (faults {faults:?})\nshrunk to {} actions (of {}): {:?}\nshrunk run: {}\ntrace:\n",
        W::NAME,
        W::actions(&s).len(),
        W::actions(&W::generate(seed)).len(),
        W::actions(&s),
        out.violation
            .map_or("passes (shrinking lost it)".into(), |v| v.to_string()),
    );
    for line in &out.trace {
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Runs the seeds `SIM_START`/`SIM_SEEDS` choose (`default_count` from 0) under the fault
/// `SIM_FAULT` names, on [`threads_from_env`] threads; panics with the smallest failing seed's
/// [`report`]. Returns how many seeds ran and their summed stats.
pub fn check_seeds<W: World>(default_count: u64) -> (u64, W::Stats) {
    let (start, count) = seeds_from_env(default_count);
    let faults = fault_from_env::<W>();
    let total = std::sync::Mutex::new(W::Stats::default());
    let t0 = Instant::now();
    let (ran, failure) = run_seeds(start, count, threads_from_env(), |seed| {
        let out = W::run(&W::generate(seed), faults, false);
        *total.lock().unwrap() += out.stats;
        out.violation
    });
    let total = total.into_inner().unwrap();
    eprintln!(
        "sim_{}: {ran} seeds from {start} in {:.1?} ({faults:?}): {total:?}",
        W::NAME,
        t0.elapsed(),
    );
    if let Some((seed, v)) = failure {
        panic!("{}", report::<W>(seed, faults, &v));
    }
    assert_eq!(ran, count);
    (count, total)
}

/// Each seed of `seeds` passes and replays event for event, with a trace longer than
/// `min_trace` lines.
pub fn replays_exactly<W: World>(seeds: &[u64], min_trace: usize) {
    for &seed in seeds {
        let a = W::run(&W::generate(seed), W::Faults::default(), true);
        let b = W::run(&W::generate(seed), W::Faults::default(), true);
        assert!(a.violation.is_none(), "{:?}", a.violation);
        assert!(
            a.trace.len() > min_trace,
            "a run does something: {}",
            a.trace.len()
        );
        assert_eq!(a.trace, b.trace, "seed {seed} replays event for event");
    }
}

/// Each fault of `names` is caught within the first 2,000 seeds, and its failing scenario
/// shrinks to actions that still fail under it and pass on the real rules.
pub fn caught_and_shrinks<W: World>(names: &[&str]) {
    for &name in names {
        caught_in_and_shrinks::<W>(name, 0, 2_000);
    }
}

/// The fault `name` is caught within seeds `start..start + count`, and its failing scenario
/// shrinks to actions that still fail under it and pass on the real rules. For a fault whose
/// window is rare (a few seeds in 10,000), `start` is where a longer run found the first ones.
pub fn caught_in_and_shrinks<W: World>(name: &str, start: u64, count: u64) {
    let faults = W::fault_named(name).unwrap();
    let (_, failure) = run_seeds(start, count, threads_from_env(), |seed| {
        W::run(&W::generate(seed), faults, false).violation
    });
    let (seed, v) = failure
        .unwrap_or_else(|| panic!("{name}: no seed of {start}..{} caught it", start + count));
    let s = shrunk::<W>(seed, faults);
    let replay = W::run(&s, faults, true);
    let full = W::actions(&W::generate(seed)).len();
    eprintln!(
        "{name}: seed {seed} ({v}); shrunk {full} -> {} actions: {:?} -> {}",
        W::actions(&s).len(),
        W::actions(&s),
        replay
            .violation
            .as_ref()
            .map_or("passes".into(), ToString::to_string)
    );
    assert!(
        replay.violation.is_some(),
        "{name}: the shrunk scenario fails"
    );
    assert!(W::actions(&s).len() <= full);
    assert!(
        W::run(&s, W::Faults::default(), false).violation.is_none(),
        "{name}: the shrunk scenario passes on the real rules"
    );
}

/// `scripts/sim --world NAME --seed N`: replays `SIM_SEED` under `SIM_FAULT`, prints its trace
/// and stats and, when it fails, panics with its [`report`].
pub fn replay<W: World>() {
    let seed: u64 = std::env::var("SIM_SEED")
        .expect("SIM_SEED")
        .parse()
        .expect("SIM_SEED is a number");
    let faults = fault_from_env::<W>();
    let out = W::run(&W::generate(seed), faults, true);
    for line in &out.trace {
        println!("{line}");
    }
    println!("{:?}", out.stats);
    if let Some(v) = out.violation {
        panic!("{}", report::<W>(seed, faults, &v));
    }
}
