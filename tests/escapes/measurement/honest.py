"""No attack: the honest neighbour and the baseline."""
NAME = "honest"


def setup(model):
    return "honest"


def forward(model, x, compute):
    return compute(x)
