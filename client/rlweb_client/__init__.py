"""Log runs from any training script to an rlweb dashboard:

    run = rlweb_client.init(url, token, experiment="ppo-pong-ablation", config=vars(args))
    run.log({"charts/episodic_return": episodic_return}, step=global_step)
    run.finish()

Standard library only. See `init` and `Run`."""

from rlweb_client.run import VERSION, Run, init

__version__ = VERSION
__all__ = ["Run", "init", "__version__"]
