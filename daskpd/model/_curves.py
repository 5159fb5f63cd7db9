"""Several model-based methods in one request: :func:`model_curves`.

Called one by one, :func:`~daskpd.partial_dependence`, :func:`~daskpd.ice`,
:func:`~daskpd.ale`, :func:`~daskpd.marginal`, :func:`~daskpd.pd_variance` and
:func:`~daskpd.h_statistic` each summarise their columns, resolve their quantiles and
scan the data.  :func:`model_curves` asks for any of them at once and merges them: one
summary pass, one resolution of every grid, bin edge and quantile, and ONE pass of every
method's job over the data (the plan of :mod:`daskpd.model._multi`).  The results are
the public functions' result objects, the same numbers bit for bit.
"""
from __future__ import annotations

from .._errors import InvalidParameterError
from .._validation import validate_params, validate_parameter
from ._arrays import grid_names, model_read, open_model_input, resolve_columns
from ._common import DEFAULT_METHOD, require_class
from ._multi import MODEL_METHODS, RequestOptions, model_methods
from ._predictor import DEFAULT_BATCH_ROWS
from ._setup import check_features
from ._grids import check_grid_arg, feature_quantiles
from ._params import PER_REQUEST, SPECS, ModelOptions, TrialOptions, check_trials_method

__all__ = ["model_curves", "ModelCurves"]

#: the methods whose curves are evaluated on a grid (``grid`` applies to them)
_GRID_METHODS = ("partial_dependence", "ice", "pd_variance")
_CALLER = "model_curves"


class ModelCurves(dict):
    """What :func:`model_curves` returns: ``{method: results}`` in the order
    ``partial_dependence, ice, ale, marginal, pd_variance, h_statistic`` (the methods
    asked for), with

    * ``result["partial_dependence"]``: ``{feature or pair: PDResult}``;
    * ``result["ice"]``, ``["ale"]``, ``["marginal"]``: ``{feature: ICEResult / ALEResult /
      MarginalResult}``;
    * ``result["pd_variance"]``: one ``PDVarianceResult`` (every feature asked for);
    * ``result["h_statistic"]``: one ``HStatisticResult`` (every pair of its features).

    ``quantiles`` is ``{feature: values}`` (with ``quantiles=``: each numeric feature's
    exact quantiles over all rows); ``phases`` names the passes that ran, in order
    (``"summary"``, ``"order statistics"``, ``"level order"``, ``"marginal bins"``,
    ``"h points"``, ``"model"``): the methods' numbers all come from the one
    ``"model"`` pass."""

    def __init__(self, results: dict, quantiles: dict, phases: list):
        super().__init__(results)
        self.quantiles = quantiles
        self.phases = phases

    def __missing__(self, key):
        if key in MODEL_METHODS:
            raise KeyError(f"{key!r} was not asked for; this request computed {list(self)}")
        raise KeyError(key)

    def __repr__(self):
        return f"ModelCurves({ {m: (list(v) if isinstance(v, dict) else type(v).__name__) for m, v in self.items()} })"


def _requests(methods, ds) -> tuple[dict, dict]:
    """``methods`` checked: ``({method: {parameter: value}}, {method: [entry, ...]})``."""
    if not isinstance(methods, dict) or not methods:
        raise InvalidParameterError(
            f"{_CALLER}: parameter methods must be a non-empty dict {{method: features}} or {{method: {{'features': "
            f"..., parameter: value}}}} with methods among {list(MODEL_METHODS)}; got {methods!r}")
    unknown = [m for m in methods if m not in MODEL_METHODS]
    if unknown:
        raise InvalidParameterError(f"{_CALLER}: parameter methods: unknown method(s) {unknown}; expected some of "
                                    f"{list(MODEL_METHODS)}")
    params, items = {}, {}
    for m in MODEL_METHODS:
        if m not in methods:
            continue
        req = methods[m]
        req = dict(req) if isinstance(req, dict) else {"features": req}
        where = f"methods[{m!r}]"
        if "features" not in req or req["features"] is None:
            raise InvalidParameterError(f"{_CALLER}: parameter {where} needs its features (a column, a list of "
                                        "columns" + (" and pairs" if m == "partial_dependence" else "") + ")")
        feats = resolve_columns(req.pop("features"), ds, f"{where}['features']")
        entries, _ = check_features(feats, ds, allow_pairs=m == "partial_dependence", name=f"{where}['features']")
        bad = [k for k in req if k not in PER_REQUEST[m]]
        if bad:
            raise InvalidParameterError(f"{_CALLER}: parameter {where}: unknown parameter(s) {bad}; {m} takes "
                                        f"'features' and {list(PER_REQUEST[m])} here (the other parameters of "
                                        f"daskpd.{m} are model_curves' own, shared by every method)")
        params[m] = {k: validate_parameter(f"{where}[{k!r}]", v, SPECS[m][k], _CALLER) for k, v in req.items()}
        if m == "h_statistic" and len({f for it in entries for f in it}) < 2:
            raise InvalidParameterError(f"{_CALLER}: parameter {where}['features'] needs at least two features (the "
                                        "H-statistic of every pair of them)")
        items[m] = entries
    return params, items


@validate_params(SPECS["model_curves"])
def model_curves(
    model,
    data,
    methods,
    *,
    grid=None,
    quantiles=None,
    target=None,
    sample_weight=None,
    response: str = "auto",
    target_class=None,
    columns=None,
    categorical_features=None,
    engine: str = "auto",
    batch_rows: int = DEFAULT_BATCH_ROWS,
    progress=None,
    storage_options=None,
    filters=None,
    random_state: int = 0,
    n_trials: int = 1,
    bootstrap: bool = True,
    subsample_size: float = 0.75,
    band=(0.05, 0.95),
    row_id=None,
    feature_names=None,
) -> ModelCurves:
    """Several model-based methods of one model on the same data, in one pass.

    Every method asked for in ``methods`` is computed from ONE pass of the model over
    ``data`` (after, when grids, bins or quantiles come from the data, one summary pass
    and the exact order statistics that resolve all of them together), where calling
    the public functions one by one costs each its own passes.  Each result is the one
    the method's public function returns for the same parameters, bit for bit.

    Parameters
    ----------
    model : fitted model or function
        As :func:`daskpd.partial_dependence`.
    data : pandas DataFrame, dask DataFrame, numpy or dask array, or parquet path / glob / directory / URL
        The rows, as :func:`daskpd.partial_dependence`.
    methods : dict
        ``{method: features}`` or ``{method: {"features": features, parameter: value,
        ...}}``, the methods among ``"partial_dependence"``, ``"ice"``, ``"ale"``,
        ``"marginal"``, ``"pd_variance"``, ``"h_statistic"``.  ``features`` is a column
        (name or index) or a list of them; for ``"partial_dependence"`` also pairs
        ``(a, b)`` (2-way PD), as its ``features``; for ``"h_statistic"`` at least two
        (every pair of them).  The per-method parameters, with the public function's
        defaults and checks:

        * ``partial_dependence``: ``grid_resolution``, ``percentiles``, ``method``;
        * ``ice``: ``grid_resolution``, ``percentiles``, ``n_lines``, ``centered``;
        * ``ale``: ``bins``;  ``marginal``: ``bins``, ``binning``;
        * ``pd_variance``: ``grid_resolution``, ``percentiles`` (importance);
        * ``h_statistic``: ``n_points``, ``total``.
    grid : dict {feature: values}, optional
        Custom grid values of the grid-based methods (partial dependence, ICE, PD
        variance), as their ``grid``; a key is a column name or index.
    quantiles : list of float, optional
        Probabilities (e.g. ``numpy.arange(0.1, 1.0, 0.1)``, the deciles a plot marks):
        every numeric feature's ``scipy.stats.mstats.mquantiles`` at them, exact over
        all rows, resolved with the grids (no pass of their own), in the result's
        ``quantiles`` (and each partial dependence's and ICE result's ``quantiles``, its
        own features', as :func:`daskpd.partial_dependence`'s ``quantiles=``).
    target : str or array, optional
        The marginal plot's response column (:func:`daskpd.marginal`'s ``target``);
        without it the marginal plot shows the mean prediction only.
    sample_weight : str or array, optional
        A weight column (or one weight per row of pandas data), for every method as in
        its public function (ICE's lines are unweighted, their average weighted).
    response, columns, categorical_features, engine, batch_rows, progress, storage_options, filters, feature_names
        As :func:`daskpd.partial_dependence`.
    target_class : optional
        The class (or output) explained; required for a multi-class classifier or a
        multi-output model (every method here explains one response).
    random_state : int, default 0
        Seeds ICE's line sample, the H-statistic's evaluation points and the trials.
    n_trials, bootstrap, subsample_size, band, row_id
        T > 1: bootstrap trials for every method in the same pass, as each public
        function's (the same weights for every method); partial dependence is then
        brute force.

    Returns
    -------
    ModelCurves
        ``{method: results}``: ``{feature or pair: PDResult}``, ``{feature: ICEResult}``,
        ``{feature: ALEResult}``, ``{feature: MarginalResult}``, one
        ``PDVarianceResult``, one ``HStatisticResult``; ``quantiles`` (``{feature:
        values}``) and ``phases`` (the passes that ran).

    Examples
    --------
    >>> import daskpd
    >>> out = daskpd.model_curves(model, data, {
    ...     "partial_dependence": {"features": ["YearMade", ("YearMade", "MachineHours")], "grid_resolution": 20,
    ...                            "method": "brute"},
    ...     "ice": {"features": ["MachineHours"], "n_lines": 50},
    ... }, quantiles=[0.1, 0.5, 0.9])
    >>> out["partial_dependence"][("YearMade", "MachineHours")].average.shape
    (20, 20)
    >>> out["ice"]["MachineHours"].lines.shape[0]
    50
    >>> out.phases
    ['summary', 'order statistics', 'model']
    """
    read = model_read(storage_options, filters)  # how the input is read, built once
    mi = open_model_input(data, read=read, feature_names=feature_names, model=model,
                          target=target, sample_weight=sample_weight, caller=_CALLER)
    ds, sample_weight, target = mi.dataset, mi.sample_weight, mi.target
    params, items = _requests(methods, ds)
    feats = list(dict.fromkeys(f for its in items.values() for it in its for f in it))
    if target is not None and "marginal" not in params:
        raise InvalidParameterError(f"{_CALLER}: parameter target is the marginal plot's response; ask for "
                                    "'marginal' in methods, or leave target out")
    if target is not None:
        ds.check([target], "parameter target")
    gridded = list(dict.fromkeys(f for m in _GRID_METHODS if m in items for it in items[m] for f in it))
    grid = check_grid_arg(grid_names(grid, ds), gridded, caller=_CALLER,
                          among="the features of the grid-based methods (partial_dependence, ice, pd_variance):")
    check_trials_method(_CALLER, n_trials, params.get("partial_dependence", {}).get("method", DEFAULT_METHOD),
                        "methods['partial_dependence']['method']")
    require_class(model, response, target_class, _CALLER, any_output=True)
    run = model_methods(
        model, ds, feats, params, target=target,
        model_options=ModelOptions(response=response, target_class=target_class, columns=columns,
                                   categorical_features=categorical_features, sample_weight=sample_weight,
                                   engine=engine, batch_rows=batch_rows, filters=filters),
        trial_options=TrialOptions(n_trials=n_trials, bootstrap=bootstrap, subsample_size=subsample_size, band=band,
                                   random_state=random_state, row_id=row_id),
        request=RequestOptions(items=items, grid=grid, quantiles=quantiles, warn_default=True,
                               name="daskpd-model-curves"))
    if quantiles is not None:  # each curve's own, as the public functions' quantiles= give them
        for r in (*run.results.get("partial_dependence", {}).values(), *run.results.get("ice", {}).values()):
            r.quantiles = feature_quantiles(run.quantiles, getattr(r, "features", None) or (r.feature,))
    return ModelCurves(run.results, run.quantiles, run.phases)
