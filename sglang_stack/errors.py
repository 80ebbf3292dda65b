"""The one exception type for mistakes a user can fix.

Anything raised as ``UserError`` is printed as a single line and exits
non-zero; everything else is a bug and keeps its traceback.
"""

import os
import sys
from pathlib import Path


# Exception classes (by name, anywhere in the class's MRO) that mean the network failed: requests',
# httpx's (huggingface_hub), urllib3's, urllib's and the socket layer's.
NETWORK = {"ConnectionError", "ConnectError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "Timeout",
           "TimeoutException", "TimeoutError", "ProxyError", "SSLError", "SSLCertVerificationError", "RemoteDisconnected",
           "IncompleteRead", "URLError", "gaierror", "NetworkError", "TransportError", "RequestException", "ProtocolError",
           "ChunkedEncodingError", "ContentDecodingError", "MaxRetryError", "NewConnectionError", "LocalProtocolError",
           "RemoteProtocolError"}


class UserError(Exception):
    """A problem with the user's input or host, worded as one line.

    Name the file, key or value at fault, and how to fix it.
    """

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


TEXT_LIMIT = 4 << 20  # the largest file a user edits here (requirements.lock.txt) is 0.3 MB


def read_text(path: Path, hint: str = "", limit: int = TEXT_LIMIT) -> str:
    """The UTF-8 text of a file the user provides or edits; anything wrong with it is one line naming it.

    Covers what a hand-edited tree meets: the file missing, a directory in its
    place, no permission, bytes that are not UTF-8 (a Latin-1 editor, a stray
    binary paste), and a file far larger than its kind ever is (``limit`` bytes,
    refused before it is read, the cap in the message). ``hint`` is appended to
    the "not found" line.
    """
    import stat

    path = Path(path)
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(st.st_mode):  # /dev/zero, a FIFO: it would be read until memory runs out, or block forever
            raise UserError(f"{path}: not a regular file (a device, a pipe or a socket): is it the right file?")
        if st.st_size > limit:
            raise UserError(f"{path}: {st.st_size} bytes, more than the {limit} such a file may hold: is it the right file?")
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)  # the cap holds even for a file that grows while it is read
        if len(data) > limit:
            raise UserError(f"{path}: more than the {limit} bytes such a file may hold: is it the right file?")
    except FileNotFoundError:
        raise UserError(f"{path}: not found{hint}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a file") from None
    except PermissionError:
        raise UserError(f"{path}: cannot read: permission denied") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 (byte {data[err.start]:#04x}): save it as UTF-8") from None


def format_error(err: UserError) -> str:
    """``error: ...`` on every line: several problems are reported one per line."""
    return "\n".join(f"error: {line}" for line in str(err).splitlines() or [""])


def run_main(main) -> None:
    """Run ``main()`` as a command: a ``UserError`` becomes one line on stderr."""
    try:
        code = main()
    except UserError as err:
        print(format_error(err), file=sys.stderr)
        sys.exit(err.code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code or 0)


def quiet_interrupts() -> None:
    """Ctrl-C before a task runs (while Invoke and its imports load): one line, not a traceback; a closed pipe
    (help piped into ``head``): nothing.

    Python still exits by SIGINT after its excepthook, so the shell sees the interrupt.
    """
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            print("error: interrupted", file=sys.stderr)
            return
        if issubclass(kind, BrokenPipeError):  # `invoke up --help | head -1`: the reader left; nothing to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush, too, goes nowhere
            return
        previous(kind, value, tb)

    sys.excepthook = hook
