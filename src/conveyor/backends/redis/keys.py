"""The Redis key layout of one Conveyor prefix.

Every key starts with the hash tag `{<prefix>}:` (prefix from the URL, default
`conveyor`), so all keys of one prefix — and so all keys of every queue in it —
share one Redis Cluster hash slot. That is what lets one Lua script dedup a job
id across queues, claim from several queues at once, and move a job between
indexes atomically. To spread load over a cluster, give groups of queues their
own prefix (one `Conveyor` app each).

| key                          | type   | holds                                             |
|------------------------------|--------|---------------------------------------------------|
| `{p}:job:<id>`               | hash   | the job: one field per `Job` attribute (absent = None; `attempt` and `lease_token` absent = 0, `meta` absent = {}), plus `seq` and, while available, `rank`; in a workflow `dependants` (JSON ids), `pending_parents`, `allow_failure` |
| `{p}:seq`                    | string | insertion counter (FIFO within a priority and run_at) |
| `{p}:queues`                 | set    | every queue name enqueued to                      |
| `{p}:jobs`                   | zset   | every job id by seq (newest-first listing)        |
| `{p}:paused`                 | hash   | queue -> "1" paused / "0" resumed                 |
| `{p}:shed`                   | hash   | queue -> waiting jobs a full queue shed, ever (absent: 0) |
| `{p}:due`                    | zset   | scheduled + retryable job ids by run_at (staging) |
| `{p}:unique`                 | hash   | unique_key -> id of the latest job holding it     |
| `{p}:schema`                 | string | layout version (what `migrate()` reports)         |
| `{p}:q:<queue>:available`    | zset   | member `<run_at µs:17><seq:12><id>`, score -priority: ZPOPMIN is claim order (with aging: score 0, `run_at - priority * aging` in place of run_at; with a fairness key: `v<vtime:17>` in front) |
| `{p}:q:<queue>:fair`         | hash   | fairness key -> vtime of its last enqueued job (conveyor.rules.fairness) |
| `{p}:q:<queue>:vtime`        | string | the vtime the queue's claims reached (17 digits)  |
| `{p}:q:<queue>:scheduled`    | zset   | id by run_at                                      |
| `{p}:q:<queue>:retryable`    | zset   | id by run_at                                      |
| `{p}:q:<queue>:running`      | zset   | id by lease_expires_at (rescue scans it)          |
| `{p}:q:<queue>:completed`    | zset   | id by finished_at (retention by age and by count) |
| `{p}:q:<queue>:cancelled`    | zset   | id by finished_at                                 |
| `{p}:q:<queue>:dead`         | zset   | id by finished_at (the dead-letter queue)         |
| `{p}:q:<queue>:blocked`      | zset   | workflow members waiting on their parents (score 0) |
| `{p}:q:<queue>:waiting`      | zset   | every scheduled, available, retryable id by seq (a bounded queue's depth and oldest jobs; layout 2) |
| `{p}:q:<queue>:wake`         | list   | at most one token: BLPOP wakes an idle worker     |
| `{p}:watching`               | zset   | job id -> how many wait for its end (job.result()) |
| `{p}:result_expiries`        | zset   | completed job id by `result_expires_at` (result_ttl; expire_results.lua) |
| `{p}:done:<id>`              | list   | a token pushed when a watched job ends (BLPOP; expires after a minute) |
| `{p}:q:<queue>:parked`       | zset   | available ids of a concurrency key that has no slot for them, by seq: listed and counted as available, never claimed |
| `{p}:ck:<key>:held`          | set    | ids holding a slot of a concurrency key: running, or available in their queue's available index |
| `{p}:ck:<key>:parked`        | zset   | the key's parked jobs, members and scores as in `q:<queue>:available` (claim order): the next to unpark is the first |
| `{p}:ck:<key>:limit`         | string | the key's limit set by its adaptive controller (conveyor.rules.adaptive), in place of its jobs' own |
| `{p}:rl:<n>:<queue>:<bucket>` | zset  | the queue's available jobs with that rate limit bucket (`rate_key`), as in `available`, which holds only jobs with none; n: the queue name's length in bytes |
| `{p}:q:<queue>:lanes`        | set    | the rate limit buckets that have had a lane in the queue |
| `{p}:rate:<bucket>`          | hash   | a token bucket: `tokens` as of `updated_at`, and the `rate`, `burst` last declared |
| `{p}:meta:<namespace>`       | hash   | small shared records (live workers, schedules)    |
| `{p}:meta:<namespace>:expires` | zset | record key by expiry time (injected clock, not EXPIRE) |

A job id is in exactly one state index at a time, the one named by its `state`
field; the Lua scripts in `scripts/` keep that true (one script per transition).
The one exception: an available job of a concurrency key is in the key's and its
queue's `parked` indexes until the key has a slot for it (conveyor.rules.concurrency),
then in `available`. These keys exist only for jobs of a concurrency key, which a
prefix written before them cannot hold: its layout (2) reads as it did.
"""  # noqa: E501 -- the table is Markdown: a row cannot be wrapped

from __future__ import annotations

from conveyor.model.job import JobState

INDEXED_STATES: tuple[JobState, ...] = tuple(JobState)
RANK_LEN = 29  # digits in front of the id in an available-index member
FAIR_LEN = 18  # "v<vtime:17>" in front of those, for a job with a fairness key


class Keys:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.base = "{" + prefix + "}:"
        self.seq = self.base + "seq"
        self.queues = self.base + "queues"
        self.paused = self.base + "paused"
        self.shed = self.base + "shed"
        self.due = self.base + "due"
        self.unique = self.base + "unique"
        self.schema = self.base + "schema"
        self.jobs = self.base + "jobs"
        self.blobs = self.base + "blobs"  # sorted set: job digest by first blob's time
        self.result_expiries = self.base + "result_expiries"

    def job(self, job_id: str) -> str:
        return f"{self.base}job:{job_id}"

    def state(self, queue: str, state: JobState | str) -> str:
        return f"{self.base}q:{queue}:{state}"

    def bucket(self, rate_key: str) -> str:
        """A token bucket (_lib.lua's bucket_key)."""
        return f"{self.base}rate:{rate_key}"

    def lane(self, queue: str, rate_key: str) -> str:
        """The queue's available jobs with rate limit bucket `rate_key` (_lib.lua's lane_key)."""
        return f"{self.base}rl:{len(queue.encode())}:{queue}:{rate_key}"

    def lanes(self, queue: str) -> str:
        return f"{self.base}q:{queue}:lanes"

    def waiting(self, queue: str) -> str:
        return f"{self.base}q:{queue}:waiting"

    def parked(self, queue: str) -> str:
        return f"{self.base}q:{queue}:parked"

    def key_holders(self, concurrency_key: str) -> str:
        return f"{self.base}ck:{concurrency_key}:held"

    def key_limit(self, concurrency_key: str) -> str:
        return f"{self.base}ck:{concurrency_key}:limit"

    def wake(self, queue: str) -> str:
        return f"{self.base}q:{queue}:wake"

    def blob(self, job_digest: str) -> str:
        """A hash of one job's blobs: `job`, `at`, and `k:<blob key>` -> bytes."""
        return f"{self.base}blob:{job_digest}"

    def meta(self, namespace: str) -> str:
        return f"{self.base}meta:{namespace}"

    def meta_expiry(self, namespace: str) -> str:
        return f"{self.base}meta:{namespace}:expires"

    def pattern(self) -> str:
        """SCAN pattern matching every key of this prefix (for test cleanup)."""
        escaped = "".join("\\" + c if c in "*?[]\\" else c for c in self.base)
        return escaped + "*"


def id_from_rank(member: str) -> str:
    return member[FAIR_LEN + RANK_LEN :] if member.startswith("v") else member[RANK_LEN:]


def micros_from_rank(member: str) -> int:
    start = FAIR_LEN if member.startswith("v") else 0
    return int(member[start : start + 17])
