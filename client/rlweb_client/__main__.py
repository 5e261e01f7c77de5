import sys

from rlweb_client.sync import main

sys.exit(main())
