"""NeMo Gym runs this file for the `crucible_episodes` server of configs/crucible.yaml: a
gymnasium-style server (/reset, /step) playing one Crucible episode per rollout."""

from crucible_client.nemo_gym_server import CrucibleEpisodeServer

if __name__ == "__main__":
    CrucibleEpisodeServer.run_webserver()
