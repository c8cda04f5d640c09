"""The Spark backend's session: the one it is given, or one it starts and stops when its
last backend closes; the session that reads files; Spark's errors in one line.
"""

from __future__ import annotations

import contextlib
import threading

from dpcurator.backends._validation import first_line
from dpcurator.errors import InvalidParameter

try:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession
except ImportError:  # pragma: no cover - depends on the environment
    raise InvalidParameter(
        "the Spark backend needs pyspark and Java 17: pip install 'dpcurator[spark]'"
    ) from None

#: Spark errors worth turning into a one-line DataError during a load.
SPARK_ERRORS: tuple[type[BaseException], ...] = (PySparkException, Py4JError)

# Sessions this module started (id of the SparkContext -> number of open backends).
_OWNED: dict[int, int] = {}
_OWNED_LOCK = threading.Lock()


def spark_message(err: BaseException) -> str:
    """One line from a Spark error: the deepest Java cause's message, if any."""
    text = ""
    java = getattr(err, "java_exception", None)
    if java is not None:
        with contextlib.suppress(Exception):
            t, depth = java, 0
            while t is not None and depth < 20:
                msg = t.getMessage()
                if msg:
                    text = str(msg)
                t, depth = t.getCause(), depth + 1
    if not text:
        getter = getattr(err, "getMessage", None)
        with contextlib.suppress(Exception):
            text = str(getter()) if callable(getter) else ""
    line = first_line(text or str(err))
    cut = line.find(" SQLSTATE:")
    return line[:cut].rstrip() if cut > 0 else line


def is_local(text: str) -> bool:
    return "://" not in text and not text.startswith(("hdfs:", "s3a:", "s3:", "gs:", "abfs"))


def acquire(spark: object) -> tuple[SparkSession, bool]:
    """The session to use, and whether this module started it."""
    if isinstance(spark, SparkSession):
        return spark, False
    if spark is not None and (not isinstance(spark, str) or not spark.strip()):
        raise InvalidParameter(
            "spark must be a SparkSession, a master URL such as 'local[2]' or "
            f"'spark://host:7077', or None, got {spark!r}"
        )
    from pyspark import SparkContext

    with _OWNED_LOCK:
        running = SparkContext._active_spark_context
        if running is not None:
            if spark is not None and running.master != spark:
                raise InvalidParameter(
                    f"a Spark session with master {running.master!r} is already running in "
                    f"this process; pass it as spark=, or stop it before using {spark!r}"
                )
            session = SparkSession.builder.getOrCreate()
            owned = id(running) in _OWNED
        else:
            master = spark if spark is not None else "local[*]"
            try:
                session = (
                    SparkSession.builder.master(master)
                    .appName("dpcurator")
                    .config("spark.ui.showConsoleProgress", "false")
                    .getOrCreate()
                )
            except (*SPARK_ERRORS, RuntimeError, OSError) as err:
                raise InvalidParameter(
                    f"cannot start Spark with master {master!r}: {spark_message(err)}"
                ) from None
            owned = True
        if owned:
            key = id(session.sparkContext)
            _OWNED[key] = _OWNED.get(key, 0) + 1
        return session, owned


def reading_session(session: SparkSession) -> SparkSession:
    """A session with the settings of ``session`` (which is left as it is) for reading
    files: names are case-sensitive (a Parquet file may hold names equal but for case;
    columns are addressed by position anyway), and the CSV reader parses every column of
    every line, so that a line with too few or too many fields is an error, as in DuckDB
    (with column pruning Spark would only parse the columns it needs)."""
    try:
        clone = SparkSession(session.sparkContext, session._jsparkSession.cloneSession())
    except Exception:  # an internal API: fall back to a fresh session's settings
        clone = session.newSession()
    clone.conf.set("spark.sql.caseSensitive", "true")
    clone.conf.set("spark.sql.csv.parser.columnPruning.enabled", "false")
    return clone


def release(session: SparkSession) -> None:
    """Stop a session this module started once its last backend is closed."""
    with _OWNED_LOCK:
        key = id(session.sparkContext)
        left = _OWNED.get(key, 0) - 1
        if left > 0:
            _OWNED[key] = left
            return
        _OWNED.pop(key, None)
    with contextlib.suppress(Exception):
        session.stop()
