"""nodeagent's tf.data hook: default tf.data options for every dataset a job iterates.

`nodeagent exec` puts this folder first on PYTHONPATH, so Python's `site` module imports this file
as `sitecustomize` at start-up (https://docs.python.org/3/library/site.html), and passes the options
as JSON in NODEAGENT_TF_DATA_OPTIONS: {"threading.private_threadpool_size": 16,
"deterministic": false, ...} (dotted attribute paths of tf.data.Options; nested objects work too).

Cost when TensorFlow is never imported: one environment lookup and one entry in sys.meta_path
whose find_spec returns None for every name but "tensorflow". No TensorFlow import, no JSON parse.

When the program imports tensorflow, the finder lets the normal loader run TensorFlow's __init__
and then wraps three entry points through which datasets are consumed:
- tf.data.Dataset.__iter__ (for loops, iter(), as_numpy_iterator(), Keras' default strategy),
- tf.distribute.Strategy.experimental_distribute_dataset (Keras model.fit under any strategy:
  keras/src/backend/tensorflow/trainer.py TFEpochIterator; tf_keras' DataHandler),
- tf.distribute.Strategy.distribute_datasets_from_function (each dataset the function returns).
Each applies `dataset.with_options(defaults)` once, where `defaults` holds only the options the
dataset has not set: an option whose value is not None in `dataset.options()` was chosen by the
user (tf.data.Options reads None for "not set": tensorflow/python/data/util/options.py) and stays.
Optimization defaults are skipped when the user turned `apply_default_optimizations` off, and
`deterministic=False` when op determinism is enabled (tf.config.experimental.enable_op_determinism).

Nothing here may break the program: any error warns once on stderr and the dataset is used as it
came. An existing sitecustomize elsewhere on sys.path still runs (chained below).

With NODEAGENT_MEASURE_DIR set, the same finder also loads _nodeagent_measure.py from this folder
once TensorFlow (or a Keras trainer) is imported, which measures the job's steps per second and
input wait (its docstring tells how). Each of the two installs only when its variable is set.
"""

from __future__ import annotations

import os
import sys

# Start-up cost matters here (every interpreter of the job imports this file): typing and
# collections.abc are for the type checker only, functools loads when TensorFlow does.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import ModuleType
    from typing import Any

ENV = "NODEAGENT_TF_DATA_OPTIONS"
MEASURE_ENV = "NODEAGENT_MEASURE_DIR"
_MEASURE = "_nodeagent_measure"  # the measuring hook's module, a file beside this one
# The modules whose import installs the measurement (the keys of _nodeagent_measure.HOOKS: named
# here so that a job that imports none of them never loads that file).
_MEASURED_MODULES = ("tensorflow", "keras.src.backend.tensorflow.trainer", "tf_keras.src.engine.training")
_HERE = os.path.dirname(os.path.abspath(__file__))
_DONE = "_nodeagent_tf_data_done"  # set on datasets that already carry the defaults (or need none)
_CACHE = "_nodeagent_tf_data"  # the eager dataset with the defaults, reused on the next epoch
_warned: set[str] = set()


def _warn(
    what: str,
    error: BaseException | None = None,
    then: str = "datasets are left as they are",
    who: str = "tf.data hook",
) -> None:
    """One line on stderr, once per kind of problem (never per dataset, never a traceback)."""
    if what in _warned:
        return
    _warned.add(what)
    detail = f": {type(error).__name__}: {error}" if error is not None else ""
    # Not contextlib.suppress: contextlib would add to every interpreter's start-up.
    try:  # noqa: SIM105
        sys.stderr.write(f"nodeagent {who}: {what}{detail}; {then}\n")
    except Exception:  # a closed stderr must not break the program either
        pass


# -- options -------------------------------------------------------------------------------------


def _flatten(doc: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if not isinstance(doc, dict):
        raise ValueError(f"{ENV} must hold a JSON object of tf.data options")
    out: list[tuple[str, Any]] = []
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.extend(_flatten(value, name + "."))
        else:
            out.append((name, value))
    return out


def _get(options: Any, path: str) -> Any:
    for part in path.split("."):
        options = getattr(options, part)
    return options


def _set(options: Any, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        options = getattr(options, part)
    setattr(options, leaf, value)


class _Defaults:
    """The parsed options, each validated against this TensorFlow's tf.data.Options."""

    def __init__(self, tf: Any, raw: str) -> None:
        import json

        self.tf = tf
        self.items: list[tuple[str, Any]] = []
        probe = tf.data.Options()
        for path, value in _flatten(json.loads(raw)):
            try:
                _get(probe, path)  # AttributeError: no such option in this TensorFlow
                _set(probe, path, value)  # TypeError: wrong type (tf.data options are type-checked)
            except (AttributeError, TypeError, ValueError) as e:
                _warn(
                    f"option {path}={value!r} is not valid in TensorFlow {tf.__version__}", e, "it is skipped"
                )
                continue
            self.items.append((path, value))

    def wanted(self, current: Any) -> Any | None:
        """A tf.data.Options with the defaults the dataset has not set itself; None if none."""
        new = self.tf.data.Options()
        changed = False
        for path, value in self.items:
            if path == "deterministic" and value is False and not _nondeterminism_allowed(self.tf):
                continue
            if (
                path.startswith("experimental_optimization.")
                and current.experimental_optimization.apply_default_optimizations is False
            ):
                continue  # the user asked for exactly the optimizations they enabled
            if _get(current, path) is not None:
                continue  # set by the user (or their library): theirs stands
            _set(new, path, value)
            changed = True
        return new if changed else None


def _nondeterminism_allowed(tf: Any) -> bool:
    """False when the program asked for determinism (TF_DETERMINISTIC_OPS or enable_op_determinism).

    enable_op_determinism() has no public getter; its module's is_op_determinism_enabled() is read
    (tensorflow/python/framework/config.py, since TF 2.8). Where that is missing, TensorFlow still
    forces deterministic=True itself while op determinism is on ("Determinism and tf.data" in
    enable_op_determinism's documentation), so leaving the option set is harmless.
    """
    if os.environ.get("TF_DETERMINISTIC_OPS", "").strip().lower() in ("1", "true"):
        return False
    try:
        import importlib  # by name: no type information for TensorFlow's internals either way

        config = importlib.import_module("tensorflow.python.framework.config")
        return not config.is_op_determinism_enabled()
    except Exception:
        return True


# -- applying ------------------------------------------------------------------------------------

_active: dict[str, _Defaults] = {}  # "defaults" once TensorFlow is imported and the options parsed


def with_defaults(dataset: Any) -> Any:
    """`dataset` with the default options applied, once; `dataset` itself on any problem."""
    d = _active.get("defaults")
    if d is None:
        return dataset
    try:
        if not isinstance(dataset, d.tf.data.Dataset) or getattr(dataset, _DONE, False):
            return dataset
        # Eager only: while tracing a tf.function (or in a TF1 graph) dataset.options() is not
        # known at graph construction time (DatasetV2.options() warns so), and a dataset built
        # there belongs to that graph and could not be reused. Keras and eager loops iterate eagerly.
        if not d.tf.executing_eagerly():
            return dataset
        cached = getattr(dataset, _CACHE, None)
        if cached is not None:
            return cached
        wanted = d.wanted(dataset.options())
        if wanted is None:
            setattr(dataset, _DONE, True)
            return dataset
        result = dataset.with_options(wanted)
        setattr(result, _DONE, True)
        setattr(dataset, _CACHE, result)  # the next epoch's iter() reuses it
        return result
    except Exception as e:
        _warn("applying the default tf.data options failed", e)
        return dataset


def _wrap_iter(original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    import functools

    @functools.wraps(original)
    def __iter__(self: Any) -> Any:
        target = with_defaults(self)
        if target is not self:
            try:
                return original(target)
            except Exception as e:
                _warn("creating an iterator with the default tf.data options failed (retried without)", e)
        return original(self)

    return __iter__


def _wrap_distribute(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(original)
    def experimental_distribute_dataset(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            args = (with_defaults(args[0]), *args[1:])
        elif "dataset" in kwargs:
            kwargs["dataset"] = with_defaults(kwargs["dataset"])
        return original(self, *args, **kwargs)

    return experimental_distribute_dataset


def _wrap_from_function(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(original)
    def distribute_datasets_from_function(self: Any, *args: Any, **kwargs: Any) -> Any:
        def wrap(fn: Any) -> Any:
            if not callable(fn):
                return fn

            @functools.wraps(fn)
            def dataset_fn(*a: Any, **k: Any) -> Any:
                return with_defaults(fn(*a, **k))

            return dataset_fn

        if args:
            args = (wrap(args[0]), *args[1:])
        elif "dataset_fn" in kwargs:
            kwargs["dataset_fn"] = wrap(kwargs["dataset_fn"])
        return original(self, *args, **kwargs)

    return distribute_datasets_from_function


def _patch(cls: type, name: str, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Wrap `name` where it is defined in `cls`'s MRO (subclasses that override it delegate to it)."""
    owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
    if owner is None:
        raise AttributeError(f"{cls.__name__}.{name} not found")
    original = owner.__dict__[name]
    if getattr(original, "_nodeagent_wrapped", False):
        return
    wrapped = wrapper(original)
    wrapped._nodeagent_wrapped = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapped)


def install(tf: Any, raw: str) -> None:
    """Parse the options and wrap TensorFlow's entry points (idempotent)."""
    defaults = _active["defaults"] = _Defaults(tf, raw)
    if not defaults.items:
        return
    _patch(tf.data.Dataset, "__iter__", _wrap_iter)
    strategy = getattr(getattr(tf, "distribute", None), "Strategy", None)
    if strategy is not None:
        _patch(strategy, "experimental_distribute_dataset", _wrap_distribute)
        _patch(strategy, "distribute_datasets_from_function", _wrap_from_function)


def _on_tensorflow(module: ModuleType) -> None:
    try:
        install(module, os.environ.get(ENV, ""))
    except Exception as e:
        _warn("could not install the default tf.data options", e)


# -- measuring ------------------------------------------------------------------------------------


def _measure_module() -> Any:
    """_nodeagent_measure, loaded by path from this folder (whatever the job did to sys.path)."""
    module = sys.modules.get(_MEASURE)
    if module is None:
        from importlib.util import module_from_spec, spec_from_file_location

        spec = spec_from_file_location(_MEASURE, os.path.join(_HERE, _MEASURE + ".py"))
        if spec is None or spec.loader is None:
            raise ImportError(f"{_MEASURE}.py is missing from {_HERE}")
        module = module_from_spec(spec)
        sys.modules[_MEASURE] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[_MEASURE]
            raise
    return module


def _measure_on(name: str) -> Callable[[ModuleType], None]:
    def install_measurement(module: ModuleType) -> None:
        try:
            _measure_module().HOOKS[name](module, _warn)
        except Exception as e:
            _warn(f"could not measure the steps ({name})", e, "the job runs on unmeasured", "measure")

    return install_measurement


# -- the lazy import hook ------------------------------------------------------------------------


class _TensorFlowFinder:
    """A meta path finder that answers only for the modules in `hooks` (tensorflow, and the Keras
    trainers when measuring), and only to wrap the real loader's exec_module so that each hook runs
    right after that module's own code ran. The spec, the loader's class and everything else stay
    the import system's (PEP 451). It leaves sys.meta_path once every module was seen."""

    def __init__(self, hooks: dict[str, list[Callable[[ModuleType], None]]]) -> None:
        self.hooks = hooks
        self.busy = False

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if fullname not in self.hooks or self.busy:
            return None
        self.busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            loader: Any = getattr(spec, "loader", None)
            exec_module = getattr(loader, "exec_module", None)
            if spec is None or exec_module is None:
                return spec
            finder_self = self

            def exec_and_install(module: ModuleType) -> None:
                if "exec_module" in vars(loader):
                    del loader.exec_module  # back to the class's own method
                exec_module(module)  # the module's own code; its errors are the program's
                finder_self.installed(fullname, module)

            # Per-spec loader instance (FileFinder makes one per module): patching it touches
            # nothing else. A loader with __slots__ refuses, and the module then loads untouched.
            loader.exec_module = exec_and_install
            return spec
        except Exception as e:
            _warn(f"could not hook the {fullname} import", e)
            return None
        finally:
            self.busy = False

    def installed(self, fullname: str, module: ModuleType) -> None:
        hooks = self.hooks.pop(fullname, [])
        if not self.hooks and self in sys.meta_path:
            sys.meta_path.remove(self)
        for hook in hooks:
            hook(module)


def _chain() -> None:
    """Run the sitecustomize this one shadows (a distribution's or a site's), as site.py would."""
    from importlib.machinery import PathFinder

    here = os.path.normcase(_HERE)
    rest = [p for p in sys.path if os.path.normcase(os.path.abspath(p or os.curdir)) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec  # only when there is one to run

    module = module_from_spec(spec)
    sys.modules["_nodeagent_chained_sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        # site.py reports a failing sitecustomize the same way and goes on.
        sys.stderr.write(f"Error in sitecustomize ({spec.origin}); set PYTHONVERBOSE for traceback:\n")
        sys.stderr.write(f"{type(e).__name__}: {e}\n")


def _start() -> None:
    hooks: dict[str, list[Callable[[ModuleType], None]]] = {}
    if os.environ.get(ENV):
        hooks["tensorflow"] = [_on_tensorflow]
    if os.environ.get(MEASURE_ENV):
        for name in _MEASURED_MODULES:
            hooks.setdefault(name, []).append(_measure_on(name))
    for name in [n for n in hooks if n in sys.modules]:  # a .pth file imported it before site ran us
        for hook in hooks.pop(name):
            hook(sys.modules[name])
    if hooks:
        sys.meta_path.insert(0, _TensorFlowFinder(hooks))
    try:
        _chain()
    except Exception as e:
        _warn("could not run the shadowed sitecustomize", e, "it was skipped")


if __name__ == "sitecustomize":  # imported by site.py; importing nodeagent.hooks.sitecustomize does nothing
    _start()
