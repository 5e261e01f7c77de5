"""JSON and multipart requests to the rlweb API over urllib, each answer sorted into one of three outcomes: the
decoded JSON body, `Unreachable` (worth retrying: no connection, a timeout, 5xx, 408, 425, 429) or `Refused`
(a 4xx that retrying will not change: 401, 403, 404, 409, 413, 422, ...)."""

from __future__ import annotations

import http.client
import json
import mimetypes
import os
import re
import shutil
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Optional

REQUEST_TIMEOUT = 20.0  # seconds for one request's connection and each read
RETRYABLE = {408, 425, 429}  # 4xx answers that mean "later"; every 5xx means it too


class Unreachable(Exception):
    """The server could not be reached or asked to be tried later (`retry_after` seconds, when it said)."""

    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


class Refused(Exception):
    """The server answered a 4xx that the same request will get again."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"{status} {detail}")
        self.status = status
        self.detail = detail


class Api:
    """The rlweb API at `url` (the site's address, e.g. http://127.0.0.1:8000/), as `token`."""

    def __init__(self, url: str, token: str, user_agent: str, timeout: float = REQUEST_TIMEOUT):
        self.base = url.rstrip("/") + "/api"
        self.site = url.rstrip("/") + "/"
        self.token = token
        self.user_agent = user_agent
        self.timeout = timeout

    def get(self, path: str) -> Any:
        return self.send("GET", path, None, {})

    def post(self, path: str, body: dict) -> Any:
        return self.send("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def post_file(self, path: str, fields: dict, file_path: str) -> Any:
        boundary = uuid.uuid4().hex
        with open(file_path, "rb") as handle:
            content = handle.read()
        name = os.path.basename(file_path).replace('"', "_")
        kind = mimetypes.guess_type(name)[0] or "application/octet-stream"
        parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{key}"\r\n\r\n{value}\r\n'.encode()
                 for key, value in fields.items()]
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                     f"Content-Type: {kind}\r\n\r\n".encode() + content + b"\r\n")
        parts.append(f"--{boundary}--\r\n".encode())
        return self.send("POST", path, b"".join(parts), {"Content-Type": f"multipart/form-data; boundary={boundary}"})

    def send(self, method: str, path: str, data: Optional[bytes], headers: dict) -> Any:
        body = self.request(method, self.base + path, data, headers, lambda answer: answer.read())
        try:
            return json.loads(body) if body else {}
        except ValueError:
            raise Unreachable(f"the answer to {method} {path} is not JSON (is {self.site} an rlweb site?)") from None

    def download(self, path: str, folder, name: Optional[str] = None) -> Path:
        """GET the file at `path` (a site path, as an API's `download_url` gives it) into `folder`, named `name` or as
        the server names it; whole or not at all: it is written beside as `.part`, renamed once complete."""
        def save(answer) -> Path:
            named = re.findall(r'filename="?([^";]+)"?', answer.headers.get("Content-Disposition", ""))
            target = Path(folder) / os.path.basename(name or (named[0] if named else path.rstrip("/").split("/")[-1]))
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            try:
                with open(partial, "wb") as handle:
                    shutil.copyfileobj(answer, handle, 1 << 20)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
            return target

        return self.request("GET", self.site.rstrip("/") + path, None, {}, save)

    def request(self, method: str, url: str, data: Optional[bytes], headers: dict, read: Callable) -> Any:
        """`read(answer)` of the request's answer; Unreachable or Refused for a failure, as the module says."""
        request = urllib.request.Request(url, data=data, method=method, headers={
            **headers, "Authorization": f"Bearer {self.token}", "Accept": "application/json",
            "User-Agent": self.user_agent})
        try:
            answer = urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as error:
            detail = error_detail(error)
            if error.code >= 500 or error.code in RETRYABLE:
                raise Unreachable(f"{error.code} {detail}", retry_after(error)) from None
            raise Refused(error.code, detail) from None
        except (urllib.error.URLError, http.client.HTTPException, socket.timeout, OSError) as error:
            raise Unreachable(str(getattr(error, "reason", None) or error) or type(error).__name__) from None
        with answer:
            try:
                return read(answer)
            except (http.client.HTTPException, socket.timeout, ConnectionError) as error:  # the body cut short; a
                raise Unreachable(str(error) or type(error).__name__) from None  # file's own error is an OSError


def error_detail(error: urllib.error.HTTPError) -> str:
    """The `detail` of an error answer, made readable (ninja's 422 lists its fields), else the reason phrase."""
    try:
        detail = json.loads(error.read() or b"{}").get("detail")
    except (ValueError, AttributeError, OSError, http.client.HTTPException):
        detail = None
    if isinstance(detail, list):
        return "; ".join(f"{'.'.join(str(part) for part in item.get('loc', []))}: {item.get('msg', '')}"
                         if isinstance(item, dict) else str(item) for item in detail)
    return str(detail) if detail else str(error.reason)


def retry_after(error: urllib.error.HTTPError) -> Optional[float]:
    try:
        return max(0.0, float(error.headers.get("Retry-After", "")))
    except (TypeError, ValueError):
        return None
