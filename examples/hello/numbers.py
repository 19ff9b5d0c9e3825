"""The numbers 1 to n (the run parameter ``n``)."""


def process(n=5):
    return list(range(1, int(n) + 1))
