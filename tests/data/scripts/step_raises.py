"""A script whose step function raises when called."""


def make_step(device, dtype):
    def step():
        raise ZeroDivisionError("the step divided by zero")

    return step, ()
