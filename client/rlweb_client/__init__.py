"""Log runs from any training script to an rlweb dashboard:

    run = rlweb_client.init(url, token, experiment="ppo-pong-ablation", config=vars(args))
    run.log({"charts/episodic_return": episodic_return}, step=global_step)
    run.finish()

and drive a site from code: `rlweb_client.Site().launch("ppo", "CartPole-v1", total_steps=50_000)`, `wait`,
`metrics`, `statistics`. Standard library only. See `init`, `Run` and `Site`."""

from rlweb_client.run import VERSION, Run, init
from rlweb_client.site import Site
from rlweb_client.transport import Refused

__version__ = VERSION
__all__ = ["Refused", "Run", "Site", "init", "__version__"]
