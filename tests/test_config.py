"""ExperimentConfig: validation messages, derived values, JSON round trip."""
import json

import pytest

from profiling_core import ConfigError, DoesNotFitError, ExperimentConfig

BAD = [
    ({"size": 0}, "size must be an integer from 1 to 65536, got 0"),
    ({"size": 70000}, "size must be an integer from 1 to 65536, got 70000"),
    ({"size": "64"}, "size must be an integer from 1 to 65536, got '64'"),
    ({"size": 64.0}, "size must be an integer from 1 to 65536, got 64.0"),
    ({"size": True}, "size must be an integer from 1 to 65536, got True"),
    ({"dtype": "int8"}, "dtype must be one of 'bf16', 'fp16', 'fp32', got 'int8'"),
    ({"dtype": "bfloat16"}, "dtype must be one of 'bf16', 'fp16', 'fp32', got 'bfloat16'"),
    ({"batch": 0}, "batch must be an integer from 1 to 4096, got 0"),
    ({"warmup": -1}, "warmup must be an integer from 0 to 10000, got -1"),
    ({"compile": "fast"}, "compile must be one of 'off', 'default', 'reduce-overhead', 'max-autotune', "
                          "'max-autotune-no-cudagraphs', got 'fast'"),
    ({"wait": -1}, "wait must be an integer from 0 to 1000, got -1"),
    ({"warmup_steps": 1001}, "warmup_steps must be an integer from 0 to 1000, got 1001"),
    ({"active": 0}, "active must be an integer from 1 to 1000, got 0"),
    ({"repeat": 0}, "repeat must be an integer from 1 to 100, got 0"),
    ({"active": 1000, "repeat": 10}, "schedule must be at most 5000 iterations ((wait + warmup_steps + active) x "
                                     "repeat), got 10020"),
    ({"device": "tpu"}, "device must be one of 'auto', 'cuda', 'cpu', got 'tpu'"),
    ({"record_shapes": "yes"}, "record_shapes must be true or false, got 'yes'"),
    ({"with_flops": 1}, "with_flops must be true or false, got 1"),
    ({"timeout_s": 0}, "timeout_s must be a number of seconds from 1 to 7200, got 0"),
    ({"row_limit": -2}, "row_limit must be an integer from -1 to 1000, got -2"),
]


@pytest.mark.parametrize("kwargs,message", BAD, ids=[m.split(" ")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_values_name_field_value_and_allowed(kwargs, message):
    with pytest.raises(ConfigError) as info:
        ExperimentConfig(**kwargs)
    assert str(info.value) == message
    assert info.value.field == message.split(" ")[0]


def test_defaults_follow_the_study():
    c = ExperimentConfig()
    assert (c.size, c.dtype, c.batch, c.warmup, c.compile) == (64, "bf16", None, 0, "off")
    assert (c.wait, c.warmup_steps, c.active, c.repeat) == (1, 1, 3, 1)
    assert c.iterations == 5 and c.recorded_steps == 3


@pytest.mark.parametrize("kwargs,name", [
    ({"size": 4096, "warmup": 10, "compile": "default"}, "4096_bf16_warm_compile"),
    ({"size": 64}, "64_bf16_cold_eager"),
    ({"size": 64, "warmup": 5, "compile": "reduce-overhead"}, "64_bf16_warm_compile_reduce-overhead"),
    ({"size": 64, "warmup": 5, "batch": 8}, "64_bf16_warm_eager_b8"),
    ({"size": 128, "dtype": "fp32"}, "128_fp32_cold_eager"),
])
def test_names_follow_the_study(kwargs, name):
    assert ExperimentConfig(**kwargs).name == name


def test_iterations_implied_by_schedule():
    c = ExperimentConfig(wait=2, warmup_steps=1, active=4, repeat=3)
    assert c.iterations == (2 + 1 + 4) * 3 == 21
    assert c.recorded_steps == 12


def test_json_round_trip_is_exact():
    c = ExperimentConfig(size=4096, dtype="fp16", batch=8, warmup=10, compile="max-autotune", wait=0,
                         warmup_steps=0, active=20, repeat=2, device="cpu", record_shapes=False, with_flops=True,
                         with_stack=True, profile_memory=True, timeout_s=30, row_limit=10)
    text = c.to_json()
    assert json.loads(text)["size"] == 4096
    back = ExperimentConfig.from_json(text)
    assert back == c and hash(back) == hash(c)


def test_from_json_refuses_unknown_fields_and_bad_json():
    with pytest.raises(ConfigError, match="config must be one of the fields"):
        ExperimentConfig.from_dict({"size": 64, "sise": 3})
    with pytest.raises(ConfigError, match="valid JSON"):
        ExperimentConfig.from_json("{size: 64")


def test_frozen():
    c = ExperimentConfig()
    with pytest.raises(Exception):
        c.size = 5  # type: ignore[misc]


def test_tensor_bytes_by_hand_and_fit_guard():
    c = ExperimentConfig(size=1024, dtype="fp32", batch=2)
    # x, w, b, matmul out, sum: 5 tensors of 2 x 1024^2, 4 bytes each
    assert c.tensor_bytes() == 4 * 5 * 2 * 1024 * 1024
    # unbatched, the study's matrix bias: x, w, b, out, sum of n^2; a vector bias is n
    assert ExperimentConfig(size=100, dtype="bf16").tensor_bytes() == 2 * 5 * 100 * 100
    assert ExperimentConfig(size=100, dtype="bf16", bias="vector").tensor_bytes() == 2 * (4 * 100 * 100 + 100)
    assert ExperimentConfig(size=100, bias="vector").bias_shape() == (100,)
    assert ExperimentConfig(size=100).bias_shape() == (100, 100)
    assert ExperimentConfig(size=100, batch=3).bias_shape() == (3, 100, 100)
    c.check_fits(10 * 2**30, "here")
    with pytest.raises(DoesNotFitError, match="needs 0.04 GiB of tensors but tiny has 0.01 GiB available"):
        c.check_fits(10 * 2**20, "tiny")
    assert ExperimentConfig(size=4096).gemm_flops() == 2 * 4096**3


def test_bias_knob_is_validated_and_named():
    assert ExperimentConfig().bias == "matrix"  # the study's: "input, weight and bias are (64, 64)"
    assert ExperimentConfig(bias="vector", warmup=10, compile="default").name == "64_bf16_warm_compile_vbias"
    with pytest.raises(ConfigError, match="bias must be one of 'matrix', 'vector', got 'row'"):
        ExperimentConfig(bias="row")


def test_configs_saved_before_the_bias_knob_keep_the_bias_they_ran_with():
    """meta.json of runs made before the knob: the workload then made a vector bias without a batch."""
    old = {k: v for k, v in ExperimentConfig(size=64).to_dict().items() if k != "bias"}
    assert ExperimentConfig.from_dict(old).bias == "vector"
    assert ExperimentConfig.from_dict({**old, "batch": 8}).bias == "matrix"
    assert ExperimentConfig.from_dict(ExperimentConfig(bias="matrix").to_dict()).bias == "matrix"


def test_matmul_precision_knob_is_validated_and_named_for_fp32_only():
    assert ExperimentConfig().matmul_precision == "highest"  # torch's default: no TF32
    assert ExperimentConfig(dtype="fp32", matmul_precision="high", size=4096, warmup=5).name == \
        "4096_fp32_warm_eager_mm-high"
    assert ExperimentConfig(dtype="bf16", matmul_precision="high").name == "64_bf16_cold_eager"  # it changes nothing
    with pytest.raises(ConfigError, match="matmul_precision must be one of 'highest', 'high', 'medium', got 'tf32'"):
        ExperimentConfig(matmul_precision="tf32")
    old = {k: v for k, v in ExperimentConfig().to_dict().items() if k != "matmul_precision"}
    assert ExperimentConfig.from_dict(old).matmul_precision == "highest"  # runs saved before the knob


def test_threads_knob_is_validated():
    assert ExperimentConfig().threads is None  # torch's default
    assert ExperimentConfig(threads=2).threads == 2
    with pytest.raises(ConfigError, match="threads must be an integer from 1 to 1024, got 0"):
        ExperimentConfig(threads=0)


def test_machine_busy_reads_the_load_before_the_run():
    from profiling_core.run import machine_busy
    assert machine_busy({"machine_load": {"cores": 2, "load_1min_before": 0.4, "load_1min_after": 2.6}}) is None
    text = machine_busy({"machine_load": {"cores": 2, "load_1min_before": 3.5, "load_1min_after": 3.9}})
    assert "load average 3.5 on 2 cores" in text
    assert machine_busy({}) is None  # older runs recorded no load
