"""Adds up what the two nodes before it produced."""

import fluksio


def process(numbers, squares):
    fluksio.logger.info("summing %d squares", len(squares))
    return {"count": len(numbers), "sum_of_squares": sum(squares)}
