"""NeMo Gym runs this file (`python app.py`, in this directory) for the `crucible` resources
server of configs/crucible.yaml: /verify scores a response as one Crucible rollout."""

from crucible_client.nemo_gym_server import CrucibleResourcesServer

if __name__ == "__main__":
    CrucibleResourcesServer.run_webserver()
