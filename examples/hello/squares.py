"""Squares each number, reporting progress as it goes."""

import fluksio


def process(numbers):
    squares = []
    for done, number in enumerate(numbers, start=1):
        squares.append(number * number)
        fluksio.emit(progress=done / len(numbers))
    return squares
