"""A real S3-protocol server for the storage tests: moto's standalone server in a process of its own, on a free
port of 127.0.0.1, and the STORAGES setting that points django-storages at one of its buckets."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

ACCESS_KEY = "rlweb-test"
SECRET_KEY = "rlweb-test-secret"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class MotoServer:
    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self) -> "MotoServer":
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def bucket(self, name: str):
        """A new, empty bucket `name` as a boto3 resource (for the tests to look into)."""
        import boto3

        s3 = boto3.resource("s3", endpoint_url=self.url, aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY, region_name=REGION)
        bucket = s3.Bucket(name)
        bucket.create()
        return bucket

    def environment(self, bucket_name: str) -> dict:
        """The RLWEB_S3_* variables a deployment would set for bucket `bucket_name` of this server."""
        return {"RLWEB_S3_BUCKET": bucket_name, "RLWEB_S3_ENDPOINT_URL": self.url, "RLWEB_S3_ACCESS_KEY_ID": ACCESS_KEY,
                "RLWEB_S3_SECRET_ACCESS_KEY": SECRET_KEY, "RLWEB_S3_REGION": REGION}
