"""Serving a stored file (a checkpoint, an episode video) to its owner, from whatever storage holds it: the
local media folder or a bucket (settings.STORAGES).

The file is streamed a chunk at a time, never read whole into memory: an async iterator under ASGI (Django
would read a sync one to the end before sending the first byte) and a sync one under WSGI. A `Range` header
gets that byte range (206), which a `<video>` element asks for to seek. With RLWEB_S3_REDIRECT the response
is instead a redirect to a signed URL of the bucket, valid for RLWEB_S3_URL_SECONDS, which answers ranges itself.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.files import File
from django.core.handlers.asgi import ASGIRequest
from django.db import DatabaseError
from django.db.models.fields.files import FieldFile
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.utils.http import content_disposition_header

CHUNK_BYTES = 256 * 1024
BYTE_RANGE = re.compile(r"bytes=([0-9]{0,18})-([0-9]{0,18})")


class RangeNotSatisfiable(Exception):
    pass


def serve(request, stored: FieldFile, filename: str, content_type: str, as_attachment: bool) -> HttpResponse:
    """`stored` as a download (`as_attachment`) or inline, named `filename`: whole, or the byte range asked
    for; 404 when the storage lacks it."""
    disposition = content_disposition_header(as_attachment, filename)
    if settings.S3_REDIRECT:
        return HttpResponseRedirect(stored.storage.url(stored.name, parameters={
            "ResponseContentDisposition": disposition, "ResponseContentType": content_type}))
    try:
        size = stored.size
        wanted = requested_range(request.headers.get("Range", ""), size)
    except FileNotFoundError:
        raise Http404("The file is missing from storage.") from None
    except RangeNotSatisfiable:
        response = HttpResponse(status=416)
        response["Content-Range"] = f"bytes */{size}"
        return response
    first, last = wanted or (0, size - 1)
    chunks = chunks_async if isinstance(request, ASGIRequest) else chunks_sync
    response = StreamingHttpResponse(chunks(stored, first, last), status=206 if wanted else 200,
                                     content_type=content_type)
    if wanted:
        response["Content-Range"] = f"bytes {first}-{last}/{size}"
    response["Content-Length"] = str(last - first + 1)
    response["Content-Disposition"] = disposition
    response["Accept-Ranges"] = "bytes"
    return response


def requested_range(header: str, size: int) -> tuple[int, int] | None:
    """The first and last byte a `Range: bytes=first-last` header asks for (`bytes=-N`: the last N bytes);
    None for no header, or one we do not read (several ranges, other units): the whole file is sent."""
    wanted = BYTE_RANGE.fullmatch(header.strip())
    if not wanted or wanted.group(1) == wanted.group(2) == "":
        return None
    first, last = wanted.groups()
    if first == "":
        first, last = max(0, size - int(last)), size - 1
    else:
        first, last = int(first), min(int(last), size - 1) if last else size - 1
    if first >= size or first > last:
        raise RangeNotSatisfiable
    return first, last


def chunks_sync(stored: FieldFile, first: int, last: int):
    """Bytes `first` to `last` of the stored file, a chunk at a time. The file is opened here, from its
    storage, so a response that is never sent leaves nothing open."""
    with stored.storage.open(stored.name, "rb") as file:
        file.seek(first)
        left = last - first + 1
        while left > 0 and (chunk := file.read(min(CHUNK_BYTES, left))):
            left -= len(chunk)
            yield chunk


async def chunks_async(stored: FieldFile, first: int, last: int):
    """The same chunks for ASGI, each read in a thread; the file is closed when the response is (a client that
    went away mid-read: once that read ends, when the generator is collected)."""
    chunks = chunks_sync(stored, first, last)
    next_chunk = sync_to_async(lambda: next(chunks, None))
    try:
        while (chunk := await next_chunk()) is not None:
            yield chunk
    finally:
        with contextlib.suppress(ValueError):  # "generator already executing": the thread is still reading
            chunks.close()


def save_with_file(row, path: str | Path, name: str) -> None:
    """Save the file at `path` into `row.file` (storage: the media folder or a bucket) under `name`, then the
    row; when the row cannot be saved the stored file goes again, so that no file is left without its row."""
    with Path(path).open("rb") as file:
        row.size = os.fstat(file.fileno()).st_size
        row.file.save(name, File(file), save=False)
    try:
        row.save()
    except DatabaseError:
        row.file.delete(save=False)
        raise
