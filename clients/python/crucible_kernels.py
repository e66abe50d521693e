"""The verifiers taskset ``crucible-kernels``: verifiers imports a taskset by its id as a
top-level module (a dotted id is not found), so this one re-exports
``crucible_client.verifiers_env``, which holds the environment."""

from crucible_client.verifiers_env import *  # noqa: F403
from crucible_client.verifiers_env import __all__  # noqa: F401
