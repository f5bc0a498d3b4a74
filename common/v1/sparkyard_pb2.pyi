import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_ACTIVE: _ClassVar[JobState]
    JOB_PAUSED: _ClassVar[JobState]
    JOB_COMPLETED: _ClassVar[JobState]
    JOB_CANCELLED: _ClassVar[JobState]

class RunState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATE_UNSPECIFIED: _ClassVar[RunState]
    RUN_SCHEDULED: _ClassVar[RunState]
    RUN_RUNNING: _ClassVar[RunState]
    RUN_SUCCEEDED: _ClassVar[RunState]
    RUN_FAILED: _ClassVar[RunState]
    RUN_CANCELLED: _ClassVar[RunState]
    RUN_SKIPPED: _ClassVar[RunState]

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_READY: _ClassVar[TaskState]
    TASK_LEASED: _ClassVar[TaskState]
    TASK_SUCCEEDED: _ClassVar[TaskState]
    TASK_FAILED: _ClassVar[TaskState]
    TASK_DEAD: _ClassVar[TaskState]
    TASK_CANCELLED: _ClassVar[TaskState]

class AttemptState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_STATE_UNSPECIFIED: _ClassVar[AttemptState]
    ATTEMPT_RUNNING: _ClassVar[AttemptState]
    ATTEMPT_SUCCEEDED: _ClassVar[AttemptState]
    ATTEMPT_FAILED: _ClassVar[AttemptState]
    ATTEMPT_TIMED_OUT: _ClassVar[AttemptState]
    ATTEMPT_LOST: _ClassVar[AttemptState]
    ATTEMPT_CANCELLED: _ClassVar[AttemptState]
    ATTEMPT_RELEASED: _ClassVar[AttemptState]

class Runner(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUNNER_UNSPECIFIED: _ClassVar[Runner]
    RUNNER_SUBMIT: _ClassVar[Runner]
    RUNNER_SESSION: _ClassVar[Runner]
    RUNNER_CONNECT: _ClassVar[Runner]

class Readiness(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READINESS_UNSPECIFIED: _ClassVar[Readiness]
    READINESS_STARTING: _ClassVar[Readiness]
    READINESS_READY: _ClassVar[Readiness]
    READINESS_DEGRADED: _ClassVar[Readiness]

class MisfirePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISFIRE_UNSPECIFIED: _ClassVar[MisfirePolicy]
    MISFIRE_SKIP: _ClassVar[MisfirePolicy]
    MISFIRE_FIRE_ONCE: _ClassVar[MisfirePolicy]
    MISFIRE_CATCH_UP: _ClassVar[MisfirePolicy]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_ALLOW: _ClassVar[OverlapPolicy]
    OVERLAP_FORBID: _ClassVar[OverlapPolicy]
    OVERLAP_REPLACE: _ClassVar[OverlapPolicy]

class Routing(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROUTING_UNSPECIFIED: _ClassVar[Routing]
    ROUTING_LEAST_LOADED: _ClassVar[Routing]
    ROUTING_ROUND_ROBIN: _ClassVar[Routing]
    ROUTING_RANDOM: _ClassVar[Routing]
    ROUTING_CONSISTENT_HASH: _ClassVar[Routing]
    ROUTING_PREVIOUS_WORKER: _ClassVar[Routing]

class AfterWhen(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AFTER_WHEN_UNSPECIFIED: _ClassVar[AfterWhen]
    AFTER_SUCCEEDED: _ClassVar[AfterWhen]
    AFTER_FAILED: _ClassVar[AfterWhen]
    AFTER_ALWAYS: _ClassVar[AfterWhen]

class TriggerRule(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRIGGER_RULE_UNSPECIFIED: _ClassVar[TriggerRule]
    ALL_SUCCEEDED: _ClassVar[TriggerRule]
    ALL_DONE: _ClassVar[TriggerRule]
    ONE_FAILED: _ClassVar[TriggerRule]
    NONE_FAILED: _ClassVar[TriggerRule]

class StepState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STEP_STATE_UNSPECIFIED: _ClassVar[StepState]
    STEP_PENDING: _ClassVar[StepState]
    STEP_RUNNING: _ClassVar[StepState]
    STEP_SUCCEEDED: _ClassVar[StepState]
    STEP_FAILED: _ClassVar[StepState]
    STEP_CANCELLED: _ClassVar[StepState]
    STEP_SKIPPED: _ClassVar[StepState]
    STEP_UPSTREAM_FAILED: _ClassVar[StepState]
JOB_STATE_UNSPECIFIED: JobState
JOB_ACTIVE: JobState
JOB_PAUSED: JobState
JOB_COMPLETED: JobState
JOB_CANCELLED: JobState
RUN_STATE_UNSPECIFIED: RunState
RUN_SCHEDULED: RunState
RUN_RUNNING: RunState
RUN_SUCCEEDED: RunState
RUN_FAILED: RunState
RUN_CANCELLED: RunState
RUN_SKIPPED: RunState
TASK_STATE_UNSPECIFIED: TaskState
TASK_READY: TaskState
TASK_LEASED: TaskState
TASK_SUCCEEDED: TaskState
TASK_FAILED: TaskState
TASK_DEAD: TaskState
TASK_CANCELLED: TaskState
ATTEMPT_STATE_UNSPECIFIED: AttemptState
ATTEMPT_RUNNING: AttemptState
ATTEMPT_SUCCEEDED: AttemptState
ATTEMPT_FAILED: AttemptState
ATTEMPT_TIMED_OUT: AttemptState
ATTEMPT_LOST: AttemptState
ATTEMPT_CANCELLED: AttemptState
ATTEMPT_RELEASED: AttemptState
RUNNER_UNSPECIFIED: Runner
RUNNER_SUBMIT: Runner
RUNNER_SESSION: Runner
RUNNER_CONNECT: Runner
READINESS_UNSPECIFIED: Readiness
READINESS_STARTING: Readiness
READINESS_READY: Readiness
READINESS_DEGRADED: Readiness
MISFIRE_UNSPECIFIED: MisfirePolicy
MISFIRE_SKIP: MisfirePolicy
MISFIRE_FIRE_ONCE: MisfirePolicy
MISFIRE_CATCH_UP: MisfirePolicy
OVERLAP_UNSPECIFIED: OverlapPolicy
OVERLAP_ALLOW: OverlapPolicy
OVERLAP_FORBID: OverlapPolicy
OVERLAP_REPLACE: OverlapPolicy
ROUTING_UNSPECIFIED: Routing
ROUTING_LEAST_LOADED: Routing
ROUTING_ROUND_ROBIN: Routing
ROUTING_RANDOM: Routing
ROUTING_CONSISTENT_HASH: Routing
ROUTING_PREVIOUS_WORKER: Routing
AFTER_WHEN_UNSPECIFIED: AfterWhen
AFTER_SUCCEEDED: AfterWhen
AFTER_FAILED: AfterWhen
AFTER_ALWAYS: AfterWhen
TRIGGER_RULE_UNSPECIFIED: TriggerRule
ALL_SUCCEEDED: TriggerRule
ALL_DONE: TriggerRule
ONE_FAILED: TriggerRule
NONE_FAILED: TriggerRule
STEP_STATE_UNSPECIFIED: StepState
STEP_PENDING: StepState
STEP_RUNNING: StepState
STEP_SUCCEEDED: StepState
STEP_FAILED: StepState
STEP_CANCELLED: StepState
STEP_SKIPPED: StepState
STEP_UPSTREAM_FAILED: StepState

class Trigger(_message.Message):
    __slots__ = ("now", "at", "delay", "cron", "every", "after", "manual", "start_at", "end_at", "max_runs")
    class Cron(_message.Message):
        __slots__ = ("expr", "tz")
        EXPR_FIELD_NUMBER: _ClassVar[int]
        TZ_FIELD_NUMBER: _ClassVar[int]
        expr: str
        tz: str
        def __init__(self, expr: _Optional[str] = ..., tz: _Optional[str] = ...) -> None: ...
    class Every(_message.Message):
        __slots__ = ("interval", "fixed_delay")
        INTERVAL_FIELD_NUMBER: _ClassVar[int]
        FIXED_DELAY_FIELD_NUMBER: _ClassVar[int]
        interval: _duration_pb2.Duration
        fixed_delay: bool
        def __init__(self, interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fixed_delay: _Optional[bool] = ...) -> None: ...
    class After(_message.Message):
        __slots__ = ("job_id", "when")
        JOB_ID_FIELD_NUMBER: _ClassVar[int]
        WHEN_FIELD_NUMBER: _ClassVar[int]
        job_id: str
        when: AfterWhen
        def __init__(self, job_id: _Optional[str] = ..., when: _Optional[_Union[AfterWhen, str]] = ...) -> None: ...
    NOW_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    EVERY_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    START_AT_FIELD_NUMBER: _ClassVar[int]
    END_AT_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNS_FIELD_NUMBER: _ClassVar[int]
    now: bool
    at: _timestamp_pb2.Timestamp
    delay: _duration_pb2.Duration
    cron: Trigger.Cron
    every: Trigger.Every
    after: Trigger.After
    manual: bool
    start_at: _timestamp_pb2.Timestamp
    end_at: _timestamp_pb2.Timestamp
    max_runs: int
    def __init__(self, now: _Optional[bool] = ..., at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cron: _Optional[_Union[Trigger.Cron, _Mapping]] = ..., every: _Optional[_Union[Trigger.Every, _Mapping]] = ..., after: _Optional[_Union[Trigger.After, _Mapping]] = ..., manual: _Optional[bool] = ..., start_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_runs: _Optional[int] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "multiplier", "max_backoff")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    multiplier: float
    max_backoff: _duration_pb2.Duration
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SplitInput(_message.Message):
    __slots__ = ("value", "mark")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    MARK_FIELD_NUMBER: _ClassVar[int]
    value: str
    mark: str
    def __init__(self, value: _Optional[str] = ..., mark: _Optional[str] = ...) -> None: ...

class SplitSpec(_message.Message):
    __slots__ = ("inputs", "parallelism", "max_bytes_per_sec", "max_records_per_sec", "task_bytes_per_sec", "task_records_per_sec", "max_concurrent")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    TASK_BYTES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    TASK_RECORDS_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[SplitInput]
    parallelism: int
    max_bytes_per_sec: int
    max_records_per_sec: int
    task_bytes_per_sec: int
    task_records_per_sec: int
    max_concurrent: int
    def __init__(self, inputs: _Optional[_Iterable[_Union[SplitInput, _Mapping]]] = ..., parallelism: _Optional[int] = ..., max_bytes_per_sec: _Optional[int] = ..., max_records_per_sec: _Optional[int] = ..., task_bytes_per_sec: _Optional[int] = ..., task_records_per_sec: _Optional[int] = ..., max_concurrent: _Optional[int] = ...) -> None: ...

class PipelineStep(_message.Message):
    __slots__ = ("name", "spec", "after", "trigger_rule", "job_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_RULE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    spec: JobSpec
    after: _containers.RepeatedScalarFieldContainer[str]
    trigger_rule: TriggerRule
    job_id: str
    def __init__(self, name: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., after: _Optional[_Iterable[str]] = ..., trigger_rule: _Optional[_Union[TriggerRule, str]] = ..., job_id: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "entrypoint", "args", "conf", "env", "py_files", "group", "priority", "runner", "trigger", "retry", "timeout", "split", "routing", "routing_key", "labels", "misfire", "misfire_catch_up_limit", "overlap", "bundle", "submit_dir", "cwd", "task_memory_mb", "on_failure", "on_success", "driver_memory", "executor_memory", "executor_cores", "num_executors", "files", "steps", "pipeline", "max_active_runs")
    class ConfEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENTRYPOINT_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    CONF_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PY_FILES_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RUNNER_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    ROUTING_KEY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_FIELD_NUMBER: _ClassVar[int]
    MISFIRE_CATCH_UP_LIMIT_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_DIR_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    TASK_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ON_SUCCESS_FIELD_NUMBER: _ClassVar[int]
    DRIVER_MEMORY_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_MEMORY_FIELD_NUMBER: _ClassVar[int]
    EXECUTOR_CORES_FIELD_NUMBER: _ClassVar[int]
    NUM_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    MAX_ACTIVE_RUNS_FIELD_NUMBER: _ClassVar[int]
    name: str
    entrypoint: str
    args: _containers.RepeatedScalarFieldContainer[str]
    conf: _containers.ScalarMap[str, str]
    env: _containers.ScalarMap[str, str]
    py_files: _containers.RepeatedScalarFieldContainer[str]
    group: str
    priority: int
    runner: Runner
    trigger: Trigger
    retry: RetryPolicy
    timeout: _duration_pb2.Duration
    split: SplitSpec
    routing: Routing
    routing_key: str
    labels: _containers.ScalarMap[str, str]
    misfire: MisfirePolicy
    misfire_catch_up_limit: int
    overlap: OverlapPolicy
    bundle: BundleRef
    submit_dir: str
    cwd: str
    task_memory_mb: int
    on_failure: str
    on_success: str
    driver_memory: str
    executor_memory: str
    executor_cores: int
    num_executors: int
    files: _containers.RepeatedScalarFieldContainer[str]
    steps: _containers.RepeatedCompositeFieldContainer[PipelineStep]
    pipeline: str
    max_active_runs: int
    def __init__(self, name: _Optional[str] = ..., entrypoint: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., conf: _Optional[_Mapping[str, str]] = ..., env: _Optional[_Mapping[str, str]] = ..., py_files: _Optional[_Iterable[str]] = ..., group: _Optional[str] = ..., priority: _Optional[int] = ..., runner: _Optional[_Union[Runner, str]] = ..., trigger: _Optional[_Union[Trigger, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., split: _Optional[_Union[SplitSpec, _Mapping]] = ..., routing: _Optional[_Union[Routing, str]] = ..., routing_key: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., misfire: _Optional[_Union[MisfirePolicy, str]] = ..., misfire_catch_up_limit: _Optional[int] = ..., overlap: _Optional[_Union[OverlapPolicy, str]] = ..., bundle: _Optional[_Union[BundleRef, _Mapping]] = ..., submit_dir: _Optional[str] = ..., cwd: _Optional[str] = ..., task_memory_mb: _Optional[int] = ..., on_failure: _Optional[str] = ..., on_success: _Optional[str] = ..., driver_memory: _Optional[str] = ..., executor_memory: _Optional[str] = ..., executor_cores: _Optional[int] = ..., num_executors: _Optional[int] = ..., files: _Optional[_Iterable[str]] = ..., steps: _Optional[_Iterable[_Union[PipelineStep, _Mapping]]] = ..., pipeline: _Optional[str] = ..., max_active_runs: _Optional[int] = ...) -> None: ...

class BundleRef(_message.Message):
    __slots__ = ("digest", "size")
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    digest: str
    size: int
    def __init__(self, digest: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "spec", "state", "created_at", "updated_at", "next_fire_at", "runs", "last_run_id", "spec_version", "spec_updated_at", "last_run_state")
    ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_AT_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEC_UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_RUN_STATE_FIELD_NUMBER: _ClassVar[int]
    id: str
    spec: JobSpec
    state: JobState
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    next_fire_at: _timestamp_pb2.Timestamp
    runs: int
    last_run_id: str
    spec_version: int
    spec_updated_at: _timestamp_pb2.Timestamp
    last_run_state: RunState
    def __init__(self, id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_fire_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., runs: _Optional[int] = ..., last_run_id: _Optional[str] = ..., spec_version: _Optional[int] = ..., spec_updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_run_state: _Optional[_Union[RunState, str]] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "worker", "fencing_token", "state", "leased_at", "started_at", "finished_at", "result_json", "error", "traceback", "log_path")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LEASED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    number: int
    worker: str
    fencing_token: int
    state: AttemptState
    leased_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    result_json: str
    error: str
    traceback: str
    log_path: str
    def __init__(self, number: _Optional[int] = ..., worker: _Optional[str] = ..., fencing_token: _Optional[int] = ..., state: _Optional[_Union[AttemptState, str]] = ..., leased_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ..., traceback: _Optional[str] = ..., log_path: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("id", "run_id", "index", "state", "inputs", "worker", "fencing_token", "attempts", "result_json", "error", "not_before")
    ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    id: str
    run_id: str
    index: int
    state: TaskState
    inputs: _containers.RepeatedCompositeFieldContainer[SplitInput]
    worker: str
    fencing_token: int
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    result_json: str
    error: str
    not_before: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., run_id: _Optional[str] = ..., index: _Optional[int] = ..., state: _Optional[_Union[TaskState, str]] = ..., inputs: _Optional[_Iterable[_Union[SplitInput, _Mapping]]] = ..., worker: _Optional[str] = ..., fencing_token: _Optional[int] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ..., not_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Run(_message.Message):
    __slots__ = ("id", "job_id", "state", "scheduled_at", "fired_at", "started_at", "finished_at", "task_count", "tasks_succeeded", "tasks_failed", "tasks_cancelled", "tasks", "reason", "result_json", "spec_version", "rerun_of", "after_run", "steps", "pipeline_run", "backfill")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_FIELD_NUMBER: _ClassVar[int]
    FIRED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TASKS_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    TASKS_FAILED_FIELD_NUMBER: _ClassVar[int]
    TASKS_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    SPEC_VERSION_FIELD_NUMBER: _ClassVar[int]
    RERUN_OF_FIELD_NUMBER: _ClassVar[int]
    AFTER_RUN_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_RUN_FIELD_NUMBER: _ClassVar[int]
    BACKFILL_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    state: RunState
    scheduled_at: _timestamp_pb2.Timestamp
    fired_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    task_count: int
    tasks_succeeded: int
    tasks_failed: int
    tasks_cancelled: int
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    reason: str
    result_json: str
    spec_version: int
    rerun_of: str
    after_run: str
    steps: _containers.RepeatedCompositeFieldContainer[StepRun]
    pipeline_run: str
    backfill: bool
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., state: _Optional[_Union[RunState, str]] = ..., scheduled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., fired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., task_count: _Optional[int] = ..., tasks_succeeded: _Optional[int] = ..., tasks_failed: _Optional[int] = ..., tasks_cancelled: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ..., reason: _Optional[str] = ..., result_json: _Optional[str] = ..., spec_version: _Optional[int] = ..., rerun_of: _Optional[str] = ..., after_run: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[StepRun, _Mapping]]] = ..., pipeline_run: _Optional[str] = ..., backfill: _Optional[bool] = ...) -> None: ...

class StepRun(_message.Message):
    __slots__ = ("name", "state", "run_id", "job_id", "after", "started_at", "finished_at", "attempts")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: StepState
    run_id: str
    job_id: str
    after: _containers.RepeatedScalarFieldContainer[str]
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    attempts: int
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[StepState, str]] = ..., run_id: _Optional[str] = ..., job_id: _Optional[str] = ..., after: _Optional[_Iterable[str]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempts: _Optional[int] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "idempotency_key", "read_mask")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    READ_MASK_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    idempotency_key: str
    read_mask: _field_mask_pb2.FieldMask
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., read_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job", "duplicate")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    job: Job
    duplicate: bool
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SubmitJobRequest]
    def __init__(self, jobs: _Optional[_Iterable[_Union[SubmitJobRequest, _Mapping]]] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SubmitJobResponse]
    def __init__(self, jobs: _Optional[_Iterable[_Union[SubmitJobResponse, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("limit", "state", "group", "name", "page_token", "pipelines")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    limit: int
    state: JobState
    group: str
    name: str
    page_token: str
    pipelines: bool
    def __init__(self, limit: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ..., group: _Optional[str] = ..., name: _Optional[str] = ..., page_token: _Optional[str] = ..., pipelines: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cancelled: _Optional[_Iterable[str]] = ...) -> None: ...

class JobIdRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("job_id", "force")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    force: bool
    def __init__(self, job_id: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ("cancelled",)
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    cancelled: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, cancelled: _Optional[_Iterable[str]] = ...) -> None: ...

class TriggerJobResponse(_message.Message):
    __slots__ = ("run",)
    RUN_FIELD_NUMBER: _ClassVar[int]
    run: Run
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ...) -> None: ...

class RerunRunRequest(_message.Message):
    __slots__ = ("run_id", "failed_only")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_ONLY_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    failed_only: bool
    def __init__(self, run_id: _Optional[str] = ..., failed_only: _Optional[bool] = ...) -> None: ...

class BackfillRequest(_message.Message):
    __slots__ = ("job_id", "start", "end", "max_concurrent")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MAX_CONCURRENT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    start: _timestamp_pb2.Timestamp
    end: _timestamp_pb2.Timestamp
    max_concurrent: int
    def __init__(self, job_id: _Optional[str] = ..., start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_concurrent: _Optional[int] = ...) -> None: ...

class BackfillResponse(_message.Message):
    __slots__ = ("planned", "added", "pending", "first", "last")
    PLANNED_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    planned: int
    added: int
    pending: int
    first: _timestamp_pb2.Timestamp
    last: _timestamp_pb2.Timestamp
    def __init__(self, planned: _Optional[int] = ..., added: _Optional[int] = ..., pending: _Optional[int] = ..., first: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job_id", "spec", "fields")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: JobSpec
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("job_id", "limit", "with_tasks")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WITH_TASKS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    limit: int
    with_tasks: bool
    def __init__(self, job_id: _Optional[str] = ..., limit: _Optional[int] = ..., with_tasks: _Optional[bool] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs",)
    RUNS_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[Run]
    def __init__(self, runs: _Optional[_Iterable[_Union[Run, _Mapping]]] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class WaitRunRequest(_message.Message):
    __slots__ = ("run_id", "timeout", "tasks_once_ended")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TASKS_ONCE_ENDED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    timeout: _duration_pb2.Duration
    tasks_once_ended: bool
    def __init__(self, run_id: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., tasks_once_ended: _Optional[bool] = ...) -> None: ...

class WaitRunResponse(_message.Message):
    __slots__ = ("run", "timed_out")
    RUN_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    run: Run
    timed_out: bool
    def __init__(self, run: _Optional[_Union[Run, _Mapping]] = ..., timed_out: _Optional[bool] = ...) -> None: ...

class StreamTaskLogRequest(_message.Message):
    __slots__ = ("task_id", "attempt", "follow", "offset", "retries")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    attempt: int
    follow: bool
    offset: int
    retries: bool
    def __init__(self, task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., follow: _Optional[bool] = ..., offset: _Optional[int] = ..., retries: _Optional[bool] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("data", "offset", "eof", "attempt")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    eof: bool
    attempt: int
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., eof: _Optional[bool] = ..., attempt: _Optional[int] = ...) -> None: ...

class Lease(_message.Message):
    __slots__ = ("task_id", "fencing_token")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("worker_id", "group", "slots", "host", "pid", "labels", "default_runner", "held", "version", "readiness", "readiness_reason", "ready_slots", "prefetch", "sent_us")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RUNNER_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    READINESS_FIELD_NUMBER: _ClassVar[int]
    READINESS_REASON_FIELD_NUMBER: _ClassVar[int]
    READY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    SENT_US_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    group: str
    slots: int
    host: str
    pid: int
    labels: _containers.ScalarMap[str, str]
    default_runner: Runner
    held: _containers.RepeatedCompositeFieldContainer[Lease]
    version: str
    readiness: Readiness
    readiness_reason: str
    ready_slots: int
    prefetch: int
    sent_us: int
    def __init__(self, worker_id: _Optional[str] = ..., group: _Optional[str] = ..., slots: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., default_runner: _Optional[_Union[Runner, str]] = ..., held: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., version: _Optional[str] = ..., readiness: _Optional[_Union[Readiness, str]] = ..., readiness_reason: _Optional[str] = ..., ready_slots: _Optional[int] = ..., prefetch: _Optional[int] = ..., sent_us: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("free_slots", "held", "draining", "readiness", "readiness_reason", "ready_slots", "prefetch", "sent_us")
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    READINESS_FIELD_NUMBER: _ClassVar[int]
    READINESS_REASON_FIELD_NUMBER: _ClassVar[int]
    READY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    SENT_US_FIELD_NUMBER: _ClassVar[int]
    free_slots: int
    held: _containers.RepeatedCompositeFieldContainer[Lease]
    draining: bool
    readiness: Readiness
    readiness_reason: str
    ready_slots: int
    prefetch: int
    sent_us: int
    def __init__(self, free_slots: _Optional[int] = ..., held: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., draining: _Optional[bool] = ..., readiness: _Optional[_Union[Readiness, str]] = ..., readiness_reason: _Optional[str] = ..., ready_slots: _Optional[int] = ..., prefetch: _Optional[int] = ..., sent_us: _Optional[int] = ...) -> None: ...

class TaskStarted(_message.Message):
    __slots__ = ("task_id", "fencing_token", "started_at", "log_path")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    started_at: _timestamp_pb2.Timestamp
    log_path: str
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., log_path: _Optional[str] = ...) -> None: ...

class TaskResult(_message.Message):
    __slots__ = ("task_id", "fencing_token", "outcome", "result_json", "error", "traceback", "started_at", "finished_at", "log_path")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    outcome: AttemptState
    result_json: str
    error: str
    traceback: str
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    log_path: str
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., outcome: _Optional[_Union[AttemptState, str]] = ..., result_json: _Optional[str] = ..., error: _Optional[str] = ..., traceback: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., log_path: _Optional[str] = ...) -> None: ...

class LogData(_message.Message):
    __slots__ = ("request_id", "data", "offset", "eof", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    data: bytes
    offset: int
    eof: bool
    error: str
    def __init__(self, request_id: _Optional[str] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ..., eof: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class Reports(_message.Message):
    __slots__ = ("started", "results", "prefetch", "seq", "sent_us")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SENT_US_FIELD_NUMBER: _ClassVar[int]
    started: _containers.RepeatedCompositeFieldContainer[TaskStarted]
    results: _containers.RepeatedCompositeFieldContainer[TaskResult]
    prefetch: int
    seq: int
    sent_us: int
    def __init__(self, started: _Optional[_Iterable[_Union[TaskStarted, _Mapping]]] = ..., results: _Optional[_Iterable[_Union[TaskResult, _Mapping]]] = ..., prefetch: _Optional[int] = ..., seq: _Optional[int] = ..., sent_us: _Optional[int] = ...) -> None: ...

class WorkerMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "log", "reports")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    REPORTS_FIELD_NUMBER: _ClassVar[int]
    register: Register
    heartbeat: Heartbeat
    log: LogData
    reports: Reports
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., log: _Optional[_Union[LogData, _Mapping]] = ..., reports: _Optional[_Union[Reports, _Mapping]] = ...) -> None: ...

class TaskAssignment(_message.Message):
    __slots__ = ("task_id", "run_id", "job_id", "index", "task_count", "attempt", "fencing_token", "spec", "inputs", "scheduled_at", "lease", "upstream_json", "start_after")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_JSON_FIELD_NUMBER: _ClassVar[int]
    START_AFTER_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    run_id: str
    job_id: str
    index: int
    task_count: int
    attempt: int
    fencing_token: int
    spec: JobSpec
    inputs: _containers.RepeatedCompositeFieldContainer[SplitInput]
    scheduled_at: _timestamp_pb2.Timestamp
    lease: _duration_pb2.Duration
    upstream_json: str
    start_after: _duration_pb2.Duration
    def __init__(self, task_id: _Optional[str] = ..., run_id: _Optional[str] = ..., job_id: _Optional[str] = ..., index: _Optional[int] = ..., task_count: _Optional[int] = ..., attempt: _Optional[int] = ..., fencing_token: _Optional[int] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., inputs: _Optional[_Iterable[_Union[SplitInput, _Mapping]]] = ..., scheduled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., upstream_json: _Optional[str] = ..., start_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("worker_id", "lease", "heartbeat_interval", "lost", "liveness_interval")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    LIVENESS_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    lease: _duration_pb2.Duration
    heartbeat_interval: _duration_pb2.Duration
    lost: _containers.RepeatedCompositeFieldContainer[Lease]
    liveness_interval: _duration_pb2.Duration
    def __init__(self, worker_id: _Optional[str] = ..., lease: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., lost: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., liveness_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class TaskBatch(_message.Message):
    __slots__ = ("tasks", "reports_seq", "asked_us")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    REPORTS_SEQ_FIELD_NUMBER: _ClassVar[int]
    ASKED_US_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskAssignment]
    reports_seq: int
    asked_us: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskAssignment, _Mapping]]] = ..., reports_seq: _Optional[int] = ..., asked_us: _Optional[int] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("renewed", "lost", "heartbeat_sent_us")
    RENEWED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_SENT_US_FIELD_NUMBER: _ClassVar[int]
    renewed: _containers.RepeatedCompositeFieldContainer[Lease]
    lost: _containers.RepeatedCompositeFieldContainer[Lease]
    heartbeat_sent_us: int
    def __init__(self, renewed: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., lost: _Optional[_Iterable[_Union[Lease, _Mapping]]] = ..., heartbeat_sent_us: _Optional[int] = ...) -> None: ...

class CancelTask(_message.Message):
    __slots__ = ("task_id", "fencing_token", "reason")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    reason: str
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ResultAck(_message.Message):
    __slots__ = ("task_id", "fencing_token", "accepted", "reason", "code")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    accepted: bool
    reason: str
    code: str
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ..., accepted: _Optional[bool] = ..., reason: _Optional[str] = ..., code: _Optional[str] = ...) -> None: ...

class LogRequest(_message.Message):
    __slots__ = ("request_id", "task_id", "attempt", "log_path", "offset", "follow", "cancel")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    task_id: str
    attempt: int
    log_path: str
    offset: int
    follow: bool
    cancel: bool
    def __init__(self, request_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., log_path: _Optional[str] = ..., offset: _Optional[int] = ..., follow: _Optional[bool] = ..., cancel: _Optional[bool] = ...) -> None: ...

class ResultAcks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[ResultAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[ResultAck, _Mapping]]] = ...) -> None: ...

class MasterMessage(_message.Message):
    __slots__ = ("registered", "batch", "heartbeat_ack", "cancel", "log_request", "acks", "drain")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    LOG_REQUEST_FIELD_NUMBER: _ClassVar[int]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    batch: TaskBatch
    heartbeat_ack: HeartbeatAck
    cancel: CancelTask
    log_request: LogRequest
    acks: ResultAcks
    drain: Drain
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., batch: _Optional[_Union[TaskBatch, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., cancel: _Optional[_Union[CancelTask, _Mapping]] = ..., log_request: _Optional[_Union[LogRequest, _Mapping]] = ..., acks: _Optional[_Union[ResultAcks, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class CheckFenceRequest(_message.Message):
    __slots__ = ("task_id", "fencing_token")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCING_TOKEN_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    fencing_token: int
    def __init__(self, task_id: _Optional[str] = ..., fencing_token: _Optional[int] = ...) -> None: ...

class CheckFenceResponse(_message.Message):
    __slots__ = ("current", "reason")
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    current: bool
    reason: str
    def __init__(self, current: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class BundleChunk(_message.Message):
    __slots__ = ("ref", "data")
    REF_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    ref: BundleRef
    data: bytes
    def __init__(self, ref: _Optional[_Union[BundleRef, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class HasBundleResponse(_message.Message):
    __slots__ = ("present", "max_bytes")
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    present: bool
    max_bytes: int
    def __init__(self, present: _Optional[bool] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("id", "group", "host", "pid", "slots", "free_slots", "alive", "draining", "registered_at", "last_seen", "tasks", "labels", "default_runner", "readiness", "readiness_reason", "ready_slots", "prefetch")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RUNNER_FIELD_NUMBER: _ClassVar[int]
    READINESS_FIELD_NUMBER: _ClassVar[int]
    READINESS_REASON_FIELD_NUMBER: _ClassVar[int]
    READY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    PREFETCH_FIELD_NUMBER: _ClassVar[int]
    id: str
    group: str
    host: str
    pid: int
    slots: int
    free_slots: int
    alive: bool
    draining: bool
    registered_at: _timestamp_pb2.Timestamp
    last_seen: _timestamp_pb2.Timestamp
    tasks: _containers.RepeatedScalarFieldContainer[str]
    labels: _containers.ScalarMap[str, str]
    default_runner: Runner
    readiness: Readiness
    readiness_reason: str
    ready_slots: int
    prefetch: int
    def __init__(self, id: _Optional[str] = ..., group: _Optional[str] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., slots: _Optional[int] = ..., free_slots: _Optional[int] = ..., alive: _Optional[bool] = ..., draining: _Optional[bool] = ..., registered_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., tasks: _Optional[_Iterable[str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., default_runner: _Optional[_Union[Runner, str]] = ..., readiness: _Optional[_Union[Readiness, str]] = ..., readiness_reason: _Optional[str] = ..., ready_slots: _Optional[int] = ..., prefetch: _Optional[int] = ...) -> None: ...

class ListWorkersRequest(_message.Message):
    __slots__ = ("include_dead",)
    INCLUDE_DEAD_FIELD_NUMBER: _ClassVar[int]
    include_dead: bool
    def __init__(self, include_dead: _Optional[bool] = ...) -> None: ...

class DrainWorkerRequest(_message.Message):
    __slots__ = ("worker_id",)
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    def __init__(self, worker_id: _Optional[str] = ...) -> None: ...

class DrainWorkerResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkersResponse(_message.Message):
    __slots__ = ("workers",)
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("version", "master_id", "started_at", "workers_alive", "slots_total", "slots_free", "ready_by_group", "leased", "timers_pending", "jobs_scheduled", "redis", "role", "leader", "epoch", "masters")
    class ReadyByGroupEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    WORKERS_ALIVE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FREE_FIELD_NUMBER: _ClassVar[int]
    READY_BY_GROUP_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    TIMERS_PENDING_FIELD_NUMBER: _ClassVar[int]
    JOBS_SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    REDIS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    MASTERS_FIELD_NUMBER: _ClassVar[int]
    version: str
    master_id: str
    started_at: _timestamp_pb2.Timestamp
    workers_alive: int
    slots_total: int
    slots_free: int
    ready_by_group: _containers.ScalarMap[str, int]
    leased: int
    timers_pending: int
    jobs_scheduled: int
    redis: str
    role: str
    leader: str
    epoch: int
    masters: _containers.RepeatedCompositeFieldContainer[MasterInfo]
    def __init__(self, version: _Optional[str] = ..., master_id: _Optional[str] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., workers_alive: _Optional[int] = ..., slots_total: _Optional[int] = ..., slots_free: _Optional[int] = ..., ready_by_group: _Optional[_Mapping[str, int]] = ..., leased: _Optional[int] = ..., timers_pending: _Optional[int] = ..., jobs_scheduled: _Optional[int] = ..., redis: _Optional[str] = ..., role: _Optional[str] = ..., leader: _Optional[str] = ..., epoch: _Optional[int] = ..., masters: _Optional[_Iterable[_Union[MasterInfo, _Mapping]]] = ...) -> None: ...

class MasterInfo(_message.Message):
    __slots__ = ("id", "address", "role", "last_seen")
    ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_FIELD_NUMBER: _ClassVar[int]
    id: str
    address: str
    role: str
    last_seen: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., address: _Optional[str] = ..., role: _Optional[str] = ..., last_seen: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
