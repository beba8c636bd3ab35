"""Run-time prediction from finished jobs (pure, online): per feature key a bounded history of recent run
times kept as a log-scale histogram, backing off from the most specific key to coarser ones.

The caller records a job only once it has finished (the server from its store's history, the simulator at
each job's end), so a prediction never sees the future. Every structure is bounded: at most
`HISTORY_PER_KEY` run times per key, `MAX_KEYS` keys (least recently updated dropped), `len(BACKOFF)` keys
looked at and `NUM_BINS` bins read per prediction, so predicting and recording are constant time.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

# Bin i holds run times in [BIN_EDGES_S[i], BIN_EDGES_S[i + 1]): factor sqrt(2) from 1 s to 2^26 s (2 years).
BIN_RATIO = math.sqrt(2.0)
NUM_BINS = 52
BIN_EDGES_S: tuple[float, ...] = tuple(BIN_RATIO**i for i in range(NUM_BINS + 1))
HISTORY_PER_KEY = 256  # the most recent run times kept per key (older ones leave the histogram)
MAX_KEYS = 20_000  # feature keys kept in all (least recently updated dropped)
MEMO_MAX = 20_000  # predictions remembered between two records (then forgotten all at once)
MEMO_TEXT_MAX = 1024  # a job whose name and script are longer is looked up each time (bounds the memo's memory)
MIN_JOBS = 8  # a key predicts once this many of its jobs have finished; else the next coarser key


@dataclass(frozen=True, slots=True)
class JobFeatures:
    """What is known of a job when it is submitted. `name` and `script` as given: keys strip their digits
    (`compute_name_key`). `time_limit_s` None = none declared. `scope`: see below."""

    user: str = ""
    tenant: str = ""
    name: str = ""
    gpus: int = 1
    script: str = ""
    queue: str = ""
    time_limit_s: float | None = None
    # Learning stays within a scope: the server sets the tenant, so one tenant's jobs never shape (nor reveal
    # through an explanation) another's predictions; "" (the simulator) learns across the whole trace.
    scope: str = ""


def compute_name_key(name: str) -> str:
    """A job name with its numbers replaced by `*` (`train-0042` and `train-7` are both `train-*`)."""
    return re.sub(r"[0-9]+", "*", name.strip())


def compute_script_key(command: str) -> str:
    """The script a command runs: the base name of its first word that names a script file (`.py`, `.sh`,
    ...), else of its first word (`python -m x` gives `python`); digits replaced as in names."""
    words = command.split()
    for w in words:
        if re.search(r"\.(py|sh|bash|jl|r|lua|ipynb)$", w, re.IGNORECASE):
            return compute_name_key(w.rsplit("/", 1)[-1])
    return compute_name_key(words[0].rsplit("/", 1)[-1]) if words else ""


def _limit_bucket(limit_s: float | None) -> str:
    return "" if limit_s is None else f"<={2 ** max(math.ceil(math.log2(max(limit_s, 1.0))), 0)}s"


# The back-off chain, most specific first: (label, key). A key with an empty part is skipped (a job
# without a name does not share the key of every other unnamed job). Why this order: the same user
# rerunning the same named job on the same GPUs is the strongest signal (3Sigma, Lucid); the script
# stands in for an unnamed job; then the name across users; then the user's habits; then what the
# queue, the time limit and the GPU count say; `all` is every finished job.
KeyFn = Callable[[JobFeatures], tuple[str, ...]]
BACKOFF: tuple[tuple[str, KeyFn], ...] = (
    ("user+name+gpus", lambda f: (f.user, compute_name_key(f.name), str(f.gpus))),
    ("user+script+gpus", lambda f: (f.user, compute_script_key(f.script), str(f.gpus))),
    ("user+name", lambda f: (f.user, compute_name_key(f.name))),
    ("name+gpus", lambda f: (compute_name_key(f.name), str(f.gpus))),
    ("name", lambda f: (compute_name_key(f.name),)),
    ("user+gpus", lambda f: (f.user, str(f.gpus))),
    ("queue+limit+gpus", lambda f: (f.tenant, f.queue or "-", _limit_bucket(f.time_limit_s), str(f.gpus))),
    ("tenant+gpus", lambda f: (f.tenant, str(f.gpus))),
    ("gpus", lambda f: (str(f.gpus),)),
    ("all", lambda f: ("*",)),
)


def compute_bin(duration_s: float) -> int:
    """The histogram bin of a run time (clamped to the first and last bins)."""
    if duration_s < BIN_RATIO:
        return 0
    return min(int(math.log(duration_s) / math.log(BIN_RATIO)), NUM_BINS - 1)


def _bin_mid_s(i: int) -> float:
    return math.sqrt(BIN_EDGES_S[i] * BIN_EDGES_S[i + 1])


@dataclass(frozen=True, slots=True)
class PredictionBasis:
    """Why: the key used (`label` as in BACKOFF, `key` its values), how many finished jobs it holds and
    their median run time, e.g. ("name", ("train-*",), 38, 7800.0)."""

    label: str
    key: tuple[str, ...]
    jobs: int
    median_s: float


@dataclass(frozen=True, slots=True)
class DurationPrediction:
    """A predicted distribution of run time: `counts[i]` finished jobs ran within bin i (BIN_EDGES_S),
    capped at the job's time limit. Every method reads the NUM_BINS bins once: constant time."""

    counts: tuple[int, ...]
    basis: PredictionBasis
    time_limit_s: float | None = None
    # expected_remaining_s(0), computed on first use: a pending job's level reads it every scheduling pass
    _fresh_s: float | None = field(default=None, init=False, repr=False, compare=False)
    # median_s and describe(), computed on first use: a page of jobs shows both for each (answers are shared)
    _median_s: float | None = field(default=None, init=False, repr=False, compare=False)
    _described: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def jobs(self) -> int:
        return sum(self.counts)

    def quantile_s(self, q: float, attained_s: float = 0.0) -> float:
        """The q-quantile of the run time given it has already run `attained_s` (bin midpoints)."""
        first = compute_bin(attained_s) if attained_s > 0 else 0
        total = sum(self.counts[first:])
        if total == 0:
            return self._cap(max(attained_s, _bin_mid_s(NUM_BINS - 1)))
        goal, acc = q * total, 0
        for i in range(first, NUM_BINS):
            acc += self.counts[i]
            if acc >= goal and self.counts[i]:
                return self._cap(max(_bin_mid_s(i), attained_s))
        return self._cap(max(_bin_mid_s(NUM_BINS - 1), attained_s))

    @property
    def median_s(self) -> float:
        if self._median_s is None:
            object.__setattr__(self, "_median_s", self.quantile_s(0.5))
        return self._median_s  # type: ignore[return-value]

    def expected_remaining_s(self, attained_s: float = 0.0) -> float:
        """Mean run time left given `attained_s` so far; a job that outlived its whole history is expected
        to run as long again (heavy tails: the longer it ran, the longer it runs)."""
        if attained_s == 0:
            if self._fresh_s is None:
                object.__setattr__(self, "_fresh_s", self._remaining_s(0.0))
            return self._fresh_s  # type: ignore[return-value]
        return self._remaining_s(attained_s)

    def _remaining_s(self, attained_s: float) -> float:
        first = compute_bin(attained_s) if attained_s > 0 else 0
        n = sum(self.counts[first:])
        if n == 0:
            return self._cap(2 * attained_s) - attained_s if attained_s > 0 else _bin_mid_s(NUM_BINS - 1)
        mean = sum(self.counts[i] * max(_bin_mid_s(i), attained_s) for i in range(first, NUM_BINS)) / n
        return max(self._cap(mean) - attained_s, 0.0)

    def gittins_s(self, attained_s: float = 0.0) -> float:
        """The inverse Gittins index in seconds (smaller = serve first): the least, over quanta ending at a
        bin edge, of expected work to the quantum's end divided by the chance of finishing within it
        (Gittins; Tiresias's Gittins variant, over this job's own predicted distribution)."""
        first = compute_bin(attained_s) if attained_s > 0 else 0
        n = sum(self.counts[first:])
        if n == 0:
            return max(attained_s, 1.0) + self.expected_remaining_s(attained_s)
        best = math.inf
        done, work_done = 0, 0.0  # jobs finishing within the quantum, their remaining work
        for i in range(first, NUM_BINS):
            c = self.counts[i]
            if not c:
                continue
            end = max(_bin_mid_s(i), attained_s)
            done += c
            work_done += c * (end - attained_s)
            # expected work = finishers' remaining work + survivors' work up to `end`
            work = (work_done + (n - done) * (end - attained_s)) / n
            best = min(best, max(work, 1.0) / (done / n))
        return best

    def describe(self) -> str:
        """`median of 38 earlier jobs named train-*: 2 h 10 m` (for `corral show` and the portal)."""
        if self._described is None:
            object.__setattr__(self, "_described", self._describe())
        return self._described  # type: ignore[return-value]

    def _describe(self) -> str:
        b = self.basis
        k = b.key
        what = {
            "user+name+gpus": lambda: f"by {k[0]} named {k[1]} on {_gpus(k[2])}",
            "user+script+gpus": lambda: f"by {k[0]} running {k[1]} on {_gpus(k[2])}",
            "user+name": lambda: f"by {k[0]} named {k[1]}",
            "name+gpus": lambda: f"named {k[0]} on {_gpus(k[1])}",
            "name": lambda: f"named {k[0]}",
            "user+gpus": lambda: f"by {k[0]} on {_gpus(k[1])}",
            "queue+limit+gpus": lambda: f"of {k[0]} in queue {k[1]} on {_gpus(k[3])}",
            "tenant+gpus": lambda: f"of {k[0]} on {_gpus(k[1])}",
            "gpus": lambda: f"on {_gpus(k[0])}",
        }.get(b.label, lambda: "")()
        return f"median of {b.jobs} earlier jobs{' ' + what if what else ''}: {format_duration(b.median_s)}"

    def _cap(self, s: float) -> float:
        return s if self.time_limit_s is None else min(s, self.time_limit_s)


def _gpus(n: str) -> str:
    return f"{n} GPU" if n == "1" else f"{n} GPUs"


def format_duration(s: float) -> str:
    """`2 h 10 m`, `4 m 5 s`, `12 s`."""
    s = round(s)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} m"
    if s >= 60:
        return f"{s // 60} m {s % 60} s"
    return f"{s} s"


@dataclass(slots=True)
class _History:
    """The last HISTORY_PER_KEY run times of one key, their histogram, and (lazily) their exact median."""

    recent: deque[float] = field(default_factory=lambda: deque(maxlen=HISTORY_PER_KEY))
    counts: list[int] = field(default_factory=lambda: [0] * NUM_BINS)
    median_s: float | None = None  # None: to compute again (a record came in)

    def add(self, duration_s: float) -> None:
        if len(self.recent) == HISTORY_PER_KEY:
            self.counts[compute_bin(self.recent[0])] -= 1  # the oldest leaves as the new one enters
        self.recent.append(duration_s)
        self.counts[compute_bin(duration_s)] += 1
        self.median_s = None

    def median(self) -> float:
        """Exact median of the kept run times (sorts at most HISTORY_PER_KEY values, once per record)."""
        if self.median_s is None:
            ordered = sorted(self.recent)
            mid = len(ordered) // 2
            self.median_s = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
        return self.median_s


@dataclass(slots=True)
class DurationPredictor:
    """Learns from finished jobs (`record`) and predicts a new job's run time (`predict`). Not thread-safe:
    one owner (the scheduler loop, or the simulator) records and predicts."""

    min_jobs: int = MIN_JOBS
    max_keys: int = MAX_KEYS
    recorded: int = 0
    _keys: OrderedDict[tuple[str, tuple[str, ...]], _History] = field(default_factory=OrderedDict)
    # predict's answers since the last record (a scheduler asks again for every pending job each pass; the
    # same features get the same answer until something is learnt): cleared by record and restore_state
    _memo: dict[JobFeatures, DurationPrediction | None] = field(default_factory=dict)
    _memo_min_jobs: int = field(default=MIN_JOBS, init=False, repr=False)

    def record(self, features: JobFeatures, duration_s: float) -> None:
        """A job with these features finished after running `duration_s` (its run time, not its wait).
        Only call this for a job that has finished: the predictor trusts the caller about time."""
        self._memo.clear()
        for label, key_fn in BACKOFF:
            key = key_fn(features)
            if not all(key):
                continue
            slot = (label, (features.scope, *key))
            h = self._keys.get(slot)
            if h is None:
                h = self._keys[slot] = _History()
                if len(self._keys) > self.max_keys:
                    self._keys.popitem(last=False)
            else:
                self._keys.move_to_end(slot)
            h.add(duration_s)
        self.recorded += 1

    def predict(self, features: JobFeatures) -> DurationPrediction | None:
        """The run-time distribution of the most specific key with at least `min_jobs` finished jobs; None
        (unknown: order by attained service) when even `all` has fewer."""
        if len(features.script) + len(features.name) > MEMO_TEXT_MAX:
            return self._lookup(features)
        memo = self._memo
        if self._memo_min_jobs != self.min_jobs:  # the threshold was changed: earlier answers may not hold
            memo.clear()
            self._memo_min_jobs = self.min_jobs
        if features in memo:
            return memo[features]
        if len(memo) >= MEMO_MAX:
            memo.clear()
        found = memo[features] = self._lookup(features)
        return found

    def _lookup(self, features: JobFeatures) -> DurationPrediction | None:
        for label, key_fn in BACKOFF:
            key = key_fn(features)
            if not all(key):
                continue
            h = self._keys.get((label, (features.scope, *key)))
            if h is None or len(h.recent) < self.min_jobs:
                continue
            basis = PredictionBasis(label, key, len(h.recent), h.median())
            return DurationPrediction(tuple(h.counts), basis, features.time_limit_s)
        return None

    def export_state(self) -> list[tuple[str, tuple[str, ...], tuple[float, ...]]]:
        """Everything learned, as plain data to store (label, key, recent run times oldest first), least
        recently updated key first: `restore_state` of it gives the same predictions (a server keeps what it
        learned across restarts; or it replays its finished jobs through `record`, oldest first)."""
        return [(label, key, tuple(h.recent)) for (label, key), h in self._keys.items()]

    def restore_state(self, state: list[tuple[str, tuple[str, ...], tuple[float, ...]]]) -> None:
        """Replace what was learned with `export_state`'s output (unknown labels skipped; bounds enforced)."""
        labels = {label for label, _ in BACKOFF}
        self._keys.clear()
        self._memo.clear()
        for label, key, runs in state[-self.max_keys :]:
            if label not in labels:
                continue
            h = self._keys[(label, tuple(key))] = _History()
            for run_s in runs[-HISTORY_PER_KEY:]:
                h.add(float(run_s))

    @property
    def key_count(self) -> int:
        return len(self._keys)

    def history_sizes(self) -> list[int]:
        """How many run times each key holds (for tests of the bounds)."""
        return [len(h.recent) for h in self._keys.values()]
