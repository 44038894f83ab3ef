"""A script workload file without make_step."""


def build(device, dtype):
    return None
