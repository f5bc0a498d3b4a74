"""The master's size limits on a job: over each, RESOURCE_EXHAUSTED naming the field, the limit and its flag."""

from __future__ import annotations

import pytest

from sparkyard.config import MasterConfig
from sparkyard.errors import ResourceExhausted
from sparkyard.master.limits import check_sizes
from sparkyard.v1 import sparkyard_pb2 as pb

CFG = MasterConfig(max_args_bytes=1000, max_env_bytes=100, max_conf_bytes=100, max_inputs=3)


def test_a_spec_within_every_limit_passes() -> None:
    spec = pb.JobSpec(args=["a" * 500, "b" * 500], env={"K": "v" * 98}, conf={"k": "v"})
    spec.split.inputs.extend([pb.SplitInput(value="x")] * 3)
    check_sizes(spec, CFG)


@pytest.mark.parametrize(("spec", "field", "flag"), [
    (pb.JobSpec(args=["a" * 600, "b" * 401]), "args", "--max-args"),
    (pb.JobSpec(env={"K" * 50: "v" * 51}), "env", "--max-env"),
    (pb.JobSpec(conf={"spark.x": "v" * 100}), "conf", "--max-conf"),
    (pb.JobSpec(split=pb.SplitSpec(inputs=[pb.SplitInput(value="x")] * 4)), "split.inputs", "--max-inputs"),
])
def test_over_a_limit_is_refused_naming_field_and_flag(spec: pb.JobSpec, field: str, flag: str) -> None:
    with pytest.raises(ResourceExhausted, match=f"^{field}: .* over the master's limit of .*\\({flag}\\)"):
        check_sizes(spec, CFG)


def test_a_16_mb_argument_is_refused_by_default() -> None:
    with pytest.raises(ResourceExhausted, match="args: 16.0 MiB in all is over the master's limit of 1.0 MiB"):
        check_sizes(pb.JobSpec(args=["a" * (16 << 20)]), MasterConfig())
