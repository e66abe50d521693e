"""List (and poison) the node's build cache of compiled extensions."""
import posix

NAME = "read_build_cache"


def attack():
    return posix.listdir("{{BUILD_CACHE}}")
