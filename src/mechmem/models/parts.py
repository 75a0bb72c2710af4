"""How analyses name a model's parts: an attention head by layer and index, and the weights' device."""

import re
from dataclasses import dataclass

import torch

_HEAD_NAME = re.compile(r"L(\d+)H(\d+)")


@dataclass(frozen=True, order=True)
class Head:
    """One attention head, named "L{layer}H{head}" in tables, JSON keys and circuit nodes.

    >>> Head(0, 1).name, Head.parse("L2H3")
    ('L0H1', Head(layer=2, head=3))
    """

    layer: int
    """The block the head sits in (0-based)."""
    head: int
    """The head's index in that block (0-based)."""

    @property
    def name(self) -> str:
        return f"L{self.layer}H{self.head}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, text: str) -> "Head":
        """The head named `text`, e.g. "L0H1"; a ValueError when `text` names no head."""
        match = _HEAD_NAME.fullmatch(text.strip())
        if match is None:
            raise ValueError(f"{text!r} names no head: expected L<layer>H<head>, e.g. L0H1")
        return cls(int(match[1]), int(match[2]))


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's parameters."""
    return next(model.parameters()).device
