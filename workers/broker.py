"""The demo's embedded broker: kombu's filesystem transport, safe for many processes at once.

kombu's filesystem transport (`filesystem://`) creates a message file and then writes into it,
so a consumer listing the folder in between can take an empty or half-written message; the
Celery worker then stops with `Unrecoverable error: JSONDecodeError` (celery/kombu#1551).
Exchange tables are rewritten in place the same way. This transport, `atomicfs://`:

- writes each message under a hidden temporary name in the queue folder and renames it into
  place: a rename is atomic, so consumers see whole messages or none;
- claims a message by renaming it into `claimed/` beside the queue folder: only one rename of a
  file can succeed, so two consumers never both take it (kombu moves it to the system's temp
  folder, which may be another filesystem, where a move is a copy that two can make);
- replaces exchange tables (queue bindings) the same way, under a lock, so concurrent workers
  starting up never lose each other's bindings;
- sets aside a message file that still cannot be read (left by an older version, a full disk)
  in `damaged/` with a log line, instead of raising into the worker.

Both the portal (portal.celery) and the node agents (workers.agent.app) import this module,
which registers the `atomicfs` scheme with kombu.
"""

import logging
import os
import tempfile
import time
import uuid
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from queue import Empty

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem, virtual
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)

SCHEME = "atomicfs"
TRANSPORT_ALIASES.setdefault(SCHEME, "workers.broker:Transport")


def is_embedded(url: str) -> bool:
    """Whether `url` names a broker kept in files on this machine (the demo's)."""
    return url.startswith((f"{SCHEME}://", "filesystem://"))


def transport_options(folder: Path) -> dict:
    """The options that keep every folder of the embedded broker under `folder`; the portal
    and its agents must use the same."""
    folder = Path(folder)
    return {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
        "store_processed": False,
    }


class Channel(filesystem.Channel):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Per queue, the names of its messages at the last listing, oldest first: one listing
        # serves many gets (a name another consumer took since fails its rename and is passed).
        self._listed: dict[str, deque] = {}
        for folder in (self.data_folder_in, self.data_folder_out, self.control_folder):
            Path(folder).mkdir(parents=True, exist_ok=True)

    @property
    def _broker_folder(self) -> Path:
        return Path(self.data_folder_in).parent

    def _folder(self, name: str) -> Path:
        folder = self._broker_folder / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _put(self, queue, payload, **kwargs):
        """Write the message whole under a hidden name, then rename it into the queue."""
        # Wall-clock nanoseconds keep the order across processes and restarts.
        name = f"{time.time_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        _write_atomically(Path(self.data_folder_out) / name, str_to_bytes(dumps(payload)))

    def _get(self, queue):
        """The oldest whole message of `queue`, claimed by renaming it out of the queue."""
        listed = self._listed.setdefault(queue, deque())
        if not listed:
            wanted = f"{queue}.msg"
            names = os.listdir(self.data_folder_in)
            listed.extend(sorted(n for n in names if n.partition(".")[2] == wanted))
        claimed_folder = self._folder("claimed")
        while listed:
            filename = listed.popleft()
            claimed = claimed_folder / filename
            try:
                os.rename(os.path.join(self.data_folder_in, filename), claimed)
            except FileNotFoundError:
                continue  # another consumer took it first
            try:
                payload = loads(bytes_to_str(claimed.read_bytes()))
            except (OSError, ValueError) as error:
                self._set_aside(claimed, error)
                continue
            if self.store_processed:
                os.replace(claimed, Path(self.processed_folder) / filename)
            else:
                claimed.unlink()
            return payload
        raise Empty()

    def _set_aside(self, path: Path, error: Exception) -> None:
        target = self._folder("damaged") / path.name
        logger.error("broker: unreadable message %s moved to %s (%s)", path.name, target, error)
        try:
            os.replace(path, target)
        except OSError:
            path.unlink(missing_ok=True)

    @contextmanager
    def _exchange_locked(self, exchange):
        """An exclusive lock on the exchange's table (a lock file of its own: the table itself
        is replaced, so a lock on it would be lost with the old file)."""
        table = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        with open(table.with_name(table.name + ".lock"), "a") as lock_file:
            filesystem.lock(lock_file, filesystem.LOCK_EX)
            try:
                yield table
            finally:
                filesystem.unlock(lock_file)

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._exchange_locked(exchange) as table:
            bindings = self.get_table(exchange)
            if entry not in bindings:
                _write_atomically(table, str_to_bytes(dumps([entry, *bindings])))

    def _delete(self, queue, exchange, routing_key, pattern, *args, **kwargs):
        virtual.Channel._delete(self, queue, exchange, routing_key, pattern, *args, **kwargs)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with self._exchange_locked(exchange) as table:
            bindings = self.get_table(exchange)
            if entry in bindings:
                bindings.remove(entry)
                _write_atomically(table, str_to_bytes(dumps(bindings)))


def _write_atomically(target: Path, data: bytes) -> None:
    """`target` holds `data` whole or is untouched: written beside it under a hidden name (no
    `.msg` ending, so no consumer takes it), then renamed over it."""
    try:
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=".", suffix=".tmp")
    except OSError as exc:
        raise ChannelError(f"Cannot write to {target.parent}") from exc
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise ChannelError(f"Cannot write {target}") from exc


class Transport(filesystem.Transport):
    """kombu's filesystem transport with whole-file writes and claims (see the module)."""

    Channel = Channel
    # kombu keeps the declared exchanges and bindings of a process in one state; one per
    # broker folder here, so a process may use two (the tests do) without one hiding the other.
    states: dict[str, virtual.BrokerState] = {}

    def __init__(self, client, **kwargs):
        super().__init__(client, **kwargs)
        folder = str(client.transport_options.get("control_folder", "control"))
        self.state = self.states.setdefault(folder, virtual.BrokerState())
