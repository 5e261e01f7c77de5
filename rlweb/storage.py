"""The local media folder (checkpoints, videos) as Django storage, and what a failing storage raises.

Two guarantees beyond FileSystemStorage: no name leads outside the folder, even through a symbolic link
(Django's own check refuses `../` and absolute names, but follows links); and no partial file is ever
shown: each file is written under a temporary name in its folder and renamed into place, so a write that
fails (disk full, permission) leaves nothing behind and no truncated checkpoint or video is offered.
(Object stores such as S3 make an upload visible only once it is complete; they need no such care.)
"""

from __future__ import annotations

import os
import uuid

from botocore.exceptions import BotoCoreError, ClientError
from django.core.exceptions import SuspiciousFileOperation
from django.core.files.storage import FileSystemStorage

# a full disk or an unwritable folder; a bucket that does not answer, refuses the keys or is missing
STORAGE_ERRORS = (OSError, BotoCoreError, ClientError)


class MediaStorage(FileSystemStorage):
    def path(self, name: str) -> str:
        path = super().path(name)
        root = os.path.realpath(self.location)
        if os.path.commonpath([root, os.path.realpath(path)]) != root:
            raise SuspiciousFileOperation(f"{name!r} leads outside the media folder")
        return path

    def _save(self, name, content):
        path = self.path(name)  # Storage.save chose a name not taken yet
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = os.path.join(os.path.dirname(path), f".partial-{uuid.uuid4().hex}")
        try:
            with open(temporary, "xb") as file:
                for chunk in content.chunks():
                    file.write(chunk)
            if self.file_permissions_mode is not None:
                os.chmod(temporary, self.file_permissions_mode)
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise
        return str(name).replace("\\", "/")
