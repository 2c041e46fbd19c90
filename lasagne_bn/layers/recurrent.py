"""Recurrent layers: :class:`CustomRecurrentLayer`, :class:`RecurrentLayer`,
:class:`LSTMLayer` and :class:`GRULayer` (with :class:`Gate`), as in
``lasagne.layers.recurrent``.

Inputs are ``(batch, time, features...)``; outputs are
``(batch, time, units...)``, or ``(batch, units...)`` with
``only_return_final=True``.  The loop over time is a ``pytensor.scan``
(which every backend runs, JAX as ``lax.scan``), or with
``unroll_scan=True`` a graph written out step by step.  Parameter names,
tags and their order are Lasagne's, so ``get_all_param_values`` lists and
parameter files of legacy networks carry over.

>>> import numpy as np, pytensor
>>> from lasagne_bn.layers import InputLayer, LSTMLayer, get_output
>>> l_in = InputLayer((None, 7, 3))
>>> l_lstm = LSTMLayer(l_in, num_units=5)
>>> l_lstm.output_shape
(None, 7, 5)
>>> f = pytensor.function([l_in.input_var], get_output(l_lstm), mode="FAST_COMPILE")
>>> f(np.ones((2, 7, 3))).shape
(2, 7, 5)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.gradient import grad_clip

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers import helper
from lasagne_bn.layers.base import Layer, MergeLayer
from lasagne_bn.layers.dense import DenseLayer
from lasagne_bn.layers.input import InputLayer
from lasagne_bn.utils import int_types, unroll_scan

if TYPE_CHECKING:
    from typing import Any

    from lasagne_bn._typing import Incoming, Nonlinearity, ParamSpec

__all__ = [
    "CustomRecurrentLayer",
    "RecurrentLayer",
    "Gate",
    "LSTMLayer",
    "GRULayer",
]


# --------------------------------------------------------------------------
# what every recurrent layer shares: optional inputs, loop options, the loop


def _incomings(layer, incoming, mask_input, inits) -> list:
    """The layer's incomings: the input, then the mask and any init given as a layer.

    Sets ``mask_incoming_index`` and ``<name>_incoming_index`` (-1 when
    absent), the attributes Lasagne's layers have.
    """
    incomings = [incoming]
    layer.mask_incoming_index = -1
    if mask_input is not None:
        incomings.append(mask_input)
        layer.mask_incoming_index = len(incomings) - 1
    for name, spec in inits:
        setattr(layer, f"{name}_incoming_index", -1)
        if isinstance(spec, Layer):
            incomings.append(spec)
            setattr(layer, f"{name}_incoming_index", len(incomings) - 1)
    return incomings


def _store_loop_options(
    layer,
    backwards,
    learn_init,
    gradient_steps,
    grad_clipping,
    unroll_scan,
    precompute_input,
    only_return_final,
) -> None:
    """Keep the options of the loop over time, and refuse the combinations Lasagne refused."""
    layer.backwards = backwards
    layer.learn_init = learn_init
    layer.gradient_steps = gradient_steps
    layer.grad_clipping = grad_clipping
    layer.unroll_scan = unroll_scan
    layer.precompute_input = precompute_input
    layer.only_return_final = only_return_final
    if unroll_scan and gradient_steps != -1:
        raise ValueError(
            f"gradient_steps={gradient_steps!r} must be -1 when unroll_scan is true "
            "(an unrolled loop has no truncated gradient)"
        )
    if unroll_scan and layer.input_shapes[0][1] is None:
        raise ValueError(
            f"the input sequence length must be known when unroll_scan is true, but the "
            f"input shape is {layer.input_shapes[0]} (layer name={layer.name!r})"
        )


def _check_units(num_units, name) -> int:
    if isinstance(num_units, bool) or not isinstance(num_units, int_types) or num_units <= 0:
        raise ValueError(f"num_units={num_units!r} must be a positive int; layer name={name!r}")
    return int(num_units)


def _optional_inputs(layer, inputs, names) -> list:
    """The mask and the given-as-layer inits among ``inputs`` (None where absent)."""
    found = []
    for name in ("mask", *names):
        index = getattr(layer, f"{name}_incoming_index")
        found.append(inputs[index] if index > 0 else None)
    return found


def _time_major(x):
    """``(batch, time, ...)`` -> ``(time, batch, ...)``."""
    return x.dimshuffle(1, 0, *range(2, x.ndim))


def _initial_state(param, sequence):
    """A ``(1, ...)`` initial-state parameter repeated for every sequence of the batch.

    ``sequence`` is the time-major input; the batch size is taken from an
    array of its shape (``zeros_like`` of one step) rather than as a number,
    because JAX cannot trace an allocation whose size is a traced value.
    """
    step = sequence[0]
    per_batch = pt.zeros_like(step[(slice(None), *(0,) * (step.ndim - 1))], dtype=param.dtype)
    return per_batch.dimshuffle(0, *(["x"] * (param.ndim - 1))) + param


def _mask_sequence(mask, state_ndim):
    """The ``(batch, time)`` mask as ``(time, batch, 1, ...)`` against ``state_ndim``-d states.

    Lasagne only ever had matrix states here; the extra trailing axes keep
    the mask aligned with the batch axis for states of more dimensions too.
    """
    return mask.dimshuffle(1, 0, *(["x"] * (state_ndim - 1)))


def _keep_where_masked(mask_n, new, previous):
    return pt.switch(mask_n, new, previous)


def _match_state(new, previous):
    """``new`` with the dtype and static sizes of ``previous``: scan needs states to keep them.

    A float64 input with floatX=float32 parameters upcasts the step's
    result (Theano refused that; the state keeps its dtype here), and a
    size of 1 that the initial state knows must be known of the step's
    result too (scan tells broadcastable axes apart).
    """
    if new.dtype != previous.dtype:
        new = pt.cast(new, previous.dtype)
    merged = [
        n if n is not None else k for k, n in zip(previous.type.shape, new.type.shape, strict=True)
    ]
    if tuple(merged) != new.type.shape:
        new = pt.specify_shape(new, merged)
    return new


def _with_state_shape(state, state_shape):
    """The initial ``state`` with the sizes the layer knows (``state_shape``, None: unknown)."""
    have = state.type.shape
    merged = [have[0]] + [
        h if h is not None else k for h, k in zip(have[1:], tuple(state_shape)[1:], strict=True)
    ]
    if tuple(merged) != have:
        state = pt.specify_shape(state, merged)
    return state


def _run_loop(layer, step, sequences, outputs_info, non_sequences) -> list:
    """The loop over time, as ``pytensor.scan`` or unrolled; one stacked result per state."""
    if layer.unroll_scan:
        return unroll_scan(
            fn=step,
            sequences=sequences,
            outputs_info=outputs_info,
            non_sequences=non_sequences,
            n_steps=layer.input_shapes[0][1],
            go_backwards=layer.backwards,
        )
    return pytensor.scan(
        fn=step,
        sequences=sequences,
        outputs_info=outputs_info,
        non_sequences=non_sequences,
        go_backwards=layer.backwards,
        truncate_gradient=layer.gradient_steps,
        strict=True,
        return_list=True,
        return_updates=False,
    )


def _finish(layer, hid_out):
    """The stacked states ``(time, batch, ...)`` as the layer's output."""
    if layer.only_return_final:
        # the state after the last step run (the first time step when backwards)
        return hid_out[-1]
    hid_out = _time_major(hid_out)
    if layer.backwards:
        hid_out = hid_out[:, ::-1]
    return hid_out


def _masked_step(step, num_states):
    """Wrap ``step(input_n, *states, *args)`` to take a mask slice and keep masked states."""

    def masked(input_n, mask_n, *rest):
        previous = rest[:num_states]
        new = step(input_n, *rest)
        return [
            _match_state(_keep_where_masked(mask_n, n, p), p)
            for n, p in zip(new, previous, strict=True)
        ]

    return masked


def _clip(x, grad_clipping):
    return grad_clip(x, -grad_clipping, grad_clipping) if grad_clipping else x


# --------------------------------------------------------------------------
# the layers


class CustomRecurrentLayer(MergeLayer):
    """A recurrent layer built from two sub-networks.

    Each step computes ``hid_t = nonlinearity(input_to_hidden(x_t) +
    hidden_to_hidden(hid_{t-1}))``.  Both sub-networks start at an
    :class:`InputLayer` of their own; their parameters belong to this layer
    (after ``hid_init``).  With ``precompute_input=True`` the
    ``input_to_hidden`` network runs once on all time steps together
    (batch and time merged into its first axis) before the loop.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape ``(batch, time, ...)``.
    input_to_hidden : Layer
        Network from one time step's input to the hidden state.
    hidden_to_hidden : Layer
        Network from the hidden state to the hidden state.
    nonlinearity : callable or None
        Applied to the sum; ``None`` is the identity.
    hid_init : initializer, array, expression or Layer
        Initial hidden state: a ``(1, ...)`` parameter repeated over the
        batch (trainable if ``learn_init``), or a layer giving one state
        per sequence.
    backwards : bool
        Run from the last time step to the first (the output keeps the
        input's time order).
    learn_init : bool
        Whether ``hid_init`` is trainable.
    gradient_steps : int
        Truncate back-propagation through time to this many steps; -1 for
        the full gradient.
    grad_clipping : float
        If nonzero, clip the gradient reaching the pre-activation of each
        step to ``[-grad_clipping, grad_clipping]``.
    unroll_scan : bool
        Write the loop out step by step (needs a known sequence length).
    precompute_input : bool
        Apply ``input_to_hidden`` to all steps at once before the loop.
    mask_input : Layer or None
        A ``(batch, time)`` layer of 0/1: at a 0 the state is carried over
        unchanged.
    only_return_final : bool
        Return only the last state, ``(batch, ...)``.
    **kwargs
        Passed to :class:`MergeLayer` (``name``).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> l_in = InputLayer((None, 6, 4))
    >>> in_to_hid = DenseLayer(InputLayer((None, 4)), 3, nonlinearity=None)
    >>> hid_to_hid = DenseLayer(InputLayer((None, 3)), 3, nonlinearity=None)
    >>> l_rec = CustomRecurrentLayer(l_in, in_to_hid, hid_to_hid)
    >>> l_rec.output_shape, len(l_rec.get_params())
    ((None, 6, 3), 5)
    """

    def __init__(
        self,
        incoming: Incoming,
        input_to_hidden: Layer,
        hidden_to_hidden: Layer,
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        hid_init: Layer | ParamSpec = init.Constant(0.0),
        backwards: bool = False,
        learn_init: bool = False,
        gradient_steps: int = -1,
        grad_clipping: float = 0,
        unroll_scan: bool = False,
        precompute_input: bool = True,
        mask_input: Layer | None = None,
        only_return_final: bool = False,
        **kwargs: Any,
    ) -> None:
        incomings = _incomings(self, incoming, mask_input, [("hid_init", hid_init)])
        super().__init__(incomings, **kwargs)
        for what, net in (
            ("input_to_hidden", input_to_hidden),
            ("hidden_to_hidden", hidden_to_hidden),
        ):
            inputs = [lyr for lyr in helper.get_all_layers(net) if isinstance(lyr, InputLayer)]
            if len(inputs) != 1:
                raise ValueError(
                    f"`{what}` must have exactly one InputLayer, but it has {len(inputs)}"
                )
            if what == "hidden_to_hidden":
                hid_in_shape = inputs[0].output_shape
        self.input_to_hidden = input_to_hidden
        self.hidden_to_hidden = hidden_to_hidden
        _store_loop_options(
            self,
            backwards,
            learn_init,
            gradient_steps,
            grad_clipping,
            unroll_scan,
            precompute_input,
            only_return_final,
        )
        self._check_shapes(
            input_to_hidden.output_shape, hidden_to_hidden.output_shape, hid_in_shape
        )
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        if isinstance(hid_init, Layer):
            self.hid_init = hid_init
        else:
            self.hid_init = self.add_param(
                hid_init,
                (1, *hidden_to_hidden.output_shape[1:]),
                name="hid_init",
                trainable=learn_init,
                regularizable=False,
            )

    def _check_shapes(self, in_to_hid, hid_to_hid, hid_in) -> None:
        """The sub-networks' shapes must fit together (unknown sizes fit anything)."""
        batch, seq_len = self.input_shapes[0][:2]

        def agree(a, b):
            return all(s1 is None or s2 is None or s1 == s2 for s1, s2 in zip(a, b, strict=False))

        if self.precompute_input:
            if None not in (in_to_hid[0], batch, seq_len) and in_to_hid[0] != batch * seq_len:
                raise ValueError(
                    "When precompute_input == True, input_to_hidden.output_shape[0] must equal "
                    "incoming.output_shape[0]*incoming.output_shape[1] (i.e. batch_size*"
                    f"sequence_length) or be None but input_to_hidden.output_shape[0] = "
                    f"{in_to_hid[0]} and incoming.output_shape[0]*incoming.output_shape[1] = "
                    f"{batch * seq_len}"
                )
        elif None not in (in_to_hid[0], hid_to_hid[0]) and in_to_hid[0] != hid_to_hid[0]:
            raise ValueError(
                "When precompute_input == False, input_to_hidden.output_shape[0] must equal "
                f"hidden_to_hidden.output_shape[0] but input_to_hidden.output_shape[0] = "
                f"{in_to_hid[0]} and hidden_to_hidden.output_shape[0] = {hid_to_hid[0]}"
            )
        if not agree(in_to_hid[1:], hid_to_hid[1:]):
            raise ValueError(
                "The output shape for input_to_hidden and hidden_to_hidden must be equal after "
                f"the first dimension, but input_to_hidden.output_shape={in_to_hid} and "
                f"hidden_to_hidden.output_shape={hid_to_hid}"
            )
        if not agree(in_to_hid[1:], hid_in[1:]):
            raise ValueError(
                "The output shape for input_to_hidden must be equal to the input shape of "
                f"hidden_to_hidden after the first dimension, but input_to_hidden.output_shape="
                f"{in_to_hid} and hidden_to_hidden:input_layer.shape={hid_in}"
            )

    def get_params(self, unwrap_shared: bool = True, **tags) -> list:
        """``hid_init`` (unless a layer), then the sub-networks' parameters."""
        params = super().get_params(unwrap_shared=unwrap_shared, **tags)
        for net in (self.input_to_hidden, self.hidden_to_hidden):
            params += helper.get_all_params(net, unwrap_shared=unwrap_shared, **tags)
        return params

    def get_output_shape_for(self, input_shapes):
        input_shape = input_shapes[0]
        hid_shape = tuple(self.hidden_to_hidden.output_shape[1:])
        if self.only_return_final:
            return (input_shape[0], *hid_shape)
        return (input_shape[0], input_shape[1], *hid_shape)

    def get_output_for(self, inputs, **kwargs):
        """The hidden states for the inputs (and the mask / initial state, when layers).

        ``kwargs`` reach the layers of both sub-networks.
        """
        mask, hid_init = _optional_inputs(self, inputs, ["hid_init"])
        input = _time_major(inputs[0])
        seq_len, num_batch = input.shape[0], input.shape[1]
        if self.precompute_input:
            flat = pt.reshape(input, (seq_len * num_batch, *input.shape[2:]), ndim=input.ndim - 1)
            out = helper.get_output(self.input_to_hidden, flat, **kwargs)
            input = pt.reshape(out, (seq_len, num_batch, *out.shape[1:]), ndim=out.ndim + 1)

        non_seqs = helper.get_all_params(self.hidden_to_hidden)
        if not self.precompute_input:
            non_seqs += helper.get_all_params(self.input_to_hidden)

        def step(input_n, hid_previous, *args):
            hid_pre = helper.get_output(self.hidden_to_hidden, hid_previous, **kwargs)
            if self.precompute_input:
                hid_pre = hid_pre + input_n
            else:
                hid_pre = hid_pre + helper.get_output(self.input_to_hidden, input_n, **kwargs)
            hid_pre = _clip(hid_pre, self.grad_clipping)
            return [_match_state(self.nonlinearity(hid_pre), hid_previous)]

        if not isinstance(self.hid_init, Layer):
            hid_init = _initial_state(self.hid_init, input)
        hid_init = _with_state_shape(hid_init, (None, *self.hidden_to_hidden.output_shape[1:]))
        sequences = [input]
        if mask is not None:
            sequences.append(_mask_sequence(mask, hid_init.ndim))
            step = _masked_step(step, 1)
        (hid_out,) = _run_loop(self, step, sequences, [hid_init], non_seqs)
        return _finish(self, hid_out)


class RecurrentLayer(CustomRecurrentLayer):
    """A vanilla recurrent layer: ``hid_t = nonlinearity(x_t W_in + hid_{t-1} W_hid + b)``.

    A :class:`CustomRecurrentLayer` whose sub-networks are two dense
    layers, named ``input_to_hidden`` and ``hidden_to_hidden`` (prefixed
    with this layer's name and a dot, when it has one).  ``W_in_to_hid``,
    ``W_hid_to_hid`` and ``b`` are available as attributes.  The input's
    trailing axes are flattened into the features.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape ``(batch, time, features...)``.
    num_units : int
        Number of hidden units.
    W_in_to_hid, W_hid_to_hid : initializer, array or expression
        Input-to-hidden ``(features, num_units)`` and hidden-to-hidden
        ``(num_units, num_units)`` weights.
    b : initializer, array, expression or None
        Bias ``(num_units,)``; None for none.
    nonlinearity, hid_init, backwards, learn_init, gradient_steps, grad_clipping, unroll_scan,\
 precompute_input, mask_input, only_return_final, **kwargs
        As for :class:`CustomRecurrentLayer`.

    Examples
    --------
    >>> l_rec = RecurrentLayer((None, 5, 2), num_units=4, name='rnn')
    >>> [p.name for p in l_rec.get_params()]
    ['rnn.hid_init', 'rnn.input_to_hidden.W', 'rnn.input_to_hidden.b', 'rnn.hidden_to_hidden.W']
    """

    def __init__(
        self,
        incoming: Incoming,
        num_units: int,
        W_in_to_hid: ParamSpec = init.Uniform(),
        W_hid_to_hid: ParamSpec = init.Uniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        hid_init: Layer | ParamSpec = init.Constant(0.0),
        backwards: bool = False,
        learn_init: bool = False,
        gradient_steps: int = -1,
        grad_clipping: float = 0,
        unroll_scan: bool = False,
        precompute_input: bool = True,
        mask_input: Layer | None = None,
        only_return_final: bool = False,
        **kwargs: Any,
    ) -> None:
        input_shape = incoming if isinstance(incoming, tuple) else incoming.output_shape
        prefix = f"{kwargs['name']}." if kwargs.get("name") is not None else ""
        layer_kwargs = {k: v for k, v in kwargs.items() if k != "name"}
        in_to_hid = DenseLayer(
            InputLayer((None, *input_shape[2:])),
            num_units,
            W=W_in_to_hid,
            b=b,
            nonlinearity=None,
            name=prefix + "input_to_hidden",
            **layer_kwargs,
        )
        hid_to_hid = DenseLayer(
            InputLayer((None, num_units)),
            num_units,
            W=W_hid_to_hid,
            b=None,
            nonlinearity=None,
            name=prefix + "hidden_to_hidden",
            **layer_kwargs,
        )
        self.W_in_to_hid = in_to_hid.W
        self.W_hid_to_hid = hid_to_hid.W
        self.b = in_to_hid.b
        super().__init__(
            incoming,
            in_to_hid,
            hid_to_hid,
            nonlinearity=nonlinearity,
            hid_init=hid_init,
            backwards=backwards,
            learn_init=learn_init,
            gradient_steps=gradient_steps,
            grad_clipping=grad_clipping,
            unroll_scan=unroll_scan,
            precompute_input=precompute_input,
            mask_input=mask_input,
            only_return_final=only_return_final,
            **kwargs,
        )


class Gate:
    """The parameters and nonlinearity of one gate of an :class:`LSTMLayer` or :class:`GRULayer`.

    Parameters
    ----------
    W_in : initializer, array or expression
        Input-to-gate weights.
    W_hid : initializer, array or expression
        Hidden-to-gate weights.
    W_cell : initializer, array, expression or None
        Cell-to-gate (peephole) weights, a vector; with ``None`` the gate
        has no ``W_cell`` attribute.  Only the LSTM uses it.
    b : initializer, array or expression
        Bias.
    nonlinearity : callable or None
        The gate's nonlinearity; ``None`` is the identity.

    Examples
    --------
    >>> gate = Gate(W_cell=None, nonlinearity=None)
    >>> hasattr(gate, 'W_cell'), gate.nonlinearity(3)
    (False, 3)
    """

    def __init__(
        self,
        W_in: ParamSpec = init.Normal(0.1),
        W_hid: ParamSpec = init.Normal(0.1),
        W_cell: ParamSpec = init.Normal(0.1),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.sigmoid,
    ) -> None:
        self.W_in = W_in
        self.W_hid = W_hid
        if W_cell is not None:
            self.W_cell = W_cell
        self.b = b
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity


def _add_gate_params(layer, gate, gate_name, num_inputs, num_units):
    """One gate's ``W_in_to_<g>``, ``W_hid_to_<g>``, ``b_<g>`` (in this order), nonlinearity."""
    return (
        layer.add_param(gate.W_in, (num_inputs, num_units), name=f"W_in_to_{gate_name}"),
        layer.add_param(gate.W_hid, (num_units, num_units), name=f"W_hid_to_{gate_name}"),
        layer.add_param(gate.b, (num_units,), name=f"b_{gate_name}", regularizable=False),
        gate.nonlinearity,
    )


def _gate_slice(x, n, num_units):
    """Columns ``n * num_units`` to ``(n + 1) * num_units`` of the stacked gate activations."""
    return x[:, n * num_units : (n + 1) * num_units]


def _sequence_input(input):
    """The input as ``(time, batch, features)``, trailing axes flattened."""
    if input.ndim > 3:
        input = pt.flatten(input, 3)
    return _time_major(input)


class LSTMLayer(MergeLayer):
    """A long short-term memory layer, with optional peephole connections.

    Per step, with ``i, f, c, o`` the input, forget, cell and output gates:
    ``i = σ_i(x W_xi + h W_hi + p_i ⊙ c_prev + b_i)``,
    ``f = σ_f(x W_xf + h W_hf + p_f ⊙ c_prev + b_f)``,
    ``c = f ⊙ c_prev + i ⊙ σ_c(x W_xc + h W_hc + b_c)``,
    ``o = σ_o(x W_xo + h W_ho + p_o ⊙ c + b_o)``, ``h = o ⊙ nonlinearity(c)``
    (the ``p`` terms only with ``peepholes``).  The output is the hidden
    state ``h``.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape ``(batch, time, features...)`` (trailing axes are
        flattened into the features).
    num_units : int
        Number of hidden units.
    ingate, forgetgate, cell, outgate : Gate
        Parameters and nonlinearities of the gates (``cell``'s ``W_cell``
        is not used).
    nonlinearity : callable or None
        Applied to the cell before the output gate; ``None`` is the
        identity.
    cell_init, hid_init : initializer, array, expression or Layer
        Initial cell and hidden states: ``(1, num_units)`` parameters
        repeated over the batch (trainable if ``learn_init``), or layers
        giving ``(batch, num_units)``.
    backwards, learn_init, gradient_steps, grad_clipping, unroll_scan, precompute_input,\
 mask_input, only_return_final
        As for :class:`CustomRecurrentLayer` (``grad_clipping`` clips the
        gradient of the stacked gate pre-activations).
    peepholes : bool
        Whether the gates see the cell (``W_cell_to_<gate>`` vectors).
    **kwargs
        Passed to :class:`MergeLayer` (``name``).

    Examples
    --------
    >>> l_lstm = LSTMLayer((None, 4, 2), num_units=3, peepholes=False)
    >>> [p.name for p in l_lstm.get_params(trainable=True)][:3]
    ['W_in_to_ingate', 'W_hid_to_ingate', 'b_ingate']
    """

    def __init__(
        self,
        incoming: Incoming,
        num_units: int,
        ingate: Gate = Gate(),
        forgetgate: Gate = Gate(),
        cell: Gate = Gate(W_cell=None, nonlinearity=nonlinearities.tanh),
        outgate: Gate = Gate(),
        nonlinearity: Nonlinearity = nonlinearities.tanh,
        cell_init: Layer | ParamSpec = init.Constant(0.0),
        hid_init: Layer | ParamSpec = init.Constant(0.0),
        backwards: bool = False,
        learn_init: bool = False,
        peepholes: bool = True,
        gradient_steps: int = -1,
        grad_clipping: float = 0,
        unroll_scan: bool = False,
        precompute_input: bool = True,
        mask_input: Layer | None = None,
        only_return_final: bool = False,
        **kwargs: Any,
    ) -> None:
        incomings = _incomings(
            self, incoming, mask_input, [("hid_init", hid_init), ("cell_init", cell_init)]
        )
        super().__init__(incomings, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.num_units = num_units = _check_units(num_units, self.name)
        self.peepholes = peepholes
        _store_loop_options(
            self,
            backwards,
            learn_init,
            gradient_steps,
            grad_clipping,
            unroll_scan,
            precompute_input,
            only_return_final,
        )
        num_inputs = int(np.prod(self.input_shapes[0][2:]))
        for gate, gate_name, nl_name in (
            (ingate, "ingate", "ingate"),
            (forgetgate, "forgetgate", "forgetgate"),
            (cell, "cell", "cell"),
            (outgate, "outgate", "outgate"),
        ):
            W_in, W_hid, b, nl = _add_gate_params(self, gate, gate_name, num_inputs, num_units)
            setattr(self, f"W_in_to_{gate_name}", W_in)
            setattr(self, f"W_hid_to_{gate_name}", W_hid)
            setattr(self, f"b_{gate_name}", b)
            setattr(self, f"nonlinearity_{nl_name}", nl)
        if peepholes:
            for gate, gate_name in (
                (ingate, "ingate"),
                (forgetgate, "forgetgate"),
                (outgate, "outgate"),
            ):
                name = f"W_cell_to_{gate_name}"
                setattr(self, name, self.add_param(gate.W_cell, (num_units,), name=name))
        for name, spec in (("cell_init", cell_init), ("hid_init", hid_init)):
            if isinstance(spec, Layer):
                setattr(self, name, spec)
            else:
                param = self.add_param(
                    spec, (1, num_units), name=name, trainable=learn_init, regularizable=False
                )
                setattr(self, name, param)

    def get_output_shape_for(self, input_shapes):
        input_shape = input_shapes[0]
        if self.only_return_final:
            return input_shape[0], self.num_units
        return input_shape[0], input_shape[1], self.num_units

    def get_output_for(self, inputs, **kwargs):
        """The hidden states for the inputs (and the mask / initial states, when layers)."""
        mask, hid_init, cell_init = _optional_inputs(self, inputs, ["hid_init", "cell_init"])
        input = _sequence_input(inputs[0])
        gates = ("ingate", "forgetgate", "cell", "outgate")
        W_in_stacked = pt.concatenate([getattr(self, f"W_in_to_{g}") for g in gates], axis=1)
        W_hid_stacked = pt.concatenate([getattr(self, f"W_hid_to_{g}") for g in gates], axis=1)
        b_stacked = pt.concatenate([getattr(self, f"b_{g}") for g in gates], axis=0)
        if self.precompute_input:
            input = pt.dot(input, W_in_stacked) + b_stacked
        units = self.num_units

        def step(input_n, cell_previous, hid_previous, W_hid, *args):
            # the weights come in as arguments: scan's inner copies, or the
            # outer ones when unrolled
            if self.peepholes:
                w_ci, w_cf, w_co, *args = args
            if not self.precompute_input:
                W_in, b = args
                input_n = pt.dot(input_n, W_in) + b
            gates = _clip(input_n + pt.dot(hid_previous, W_hid), self.grad_clipping)
            ingate = _gate_slice(gates, 0, units)
            forgetgate = _gate_slice(gates, 1, units)
            cell_input = _gate_slice(gates, 2, units)
            outgate = _gate_slice(gates, 3, units)
            if self.peepholes:
                ingate = ingate + cell_previous * w_ci
                forgetgate = forgetgate + cell_previous * w_cf
            ingate = self.nonlinearity_ingate(ingate)
            forgetgate = self.nonlinearity_forgetgate(forgetgate)
            cell_input = self.nonlinearity_cell(cell_input)
            cell = forgetgate * cell_previous + ingate * cell_input
            if self.peepholes:
                outgate = outgate + cell * w_co
            outgate = self.nonlinearity_outgate(outgate)
            hid = outgate * self.nonlinearity(cell)
            return [_match_state(cell, cell_previous), _match_state(hid, hid_previous)]

        if not isinstance(self.cell_init, Layer):
            cell_init = _initial_state(self.cell_init, input)
        if not isinstance(self.hid_init, Layer):
            hid_init = _initial_state(self.hid_init, input)
        cell_init = _with_state_shape(cell_init, (None, units))
        hid_init = _with_state_shape(hid_init, (None, units))
        non_seqs = [W_hid_stacked]
        if self.peepholes:
            non_seqs += [self.W_cell_to_ingate, self.W_cell_to_forgetgate, self.W_cell_to_outgate]
        if not self.precompute_input:
            non_seqs += [W_in_stacked, b_stacked]
        sequences = [input]
        if mask is not None:
            sequences.append(_mask_sequence(mask, 2))
            step = _masked_step(step, 2)
        _cell_out, hid_out = _run_loop(self, step, sequences, [cell_init, hid_init], non_seqs)
        return _finish(self, hid_out)


class GRULayer(MergeLayer):
    """A gated recurrent unit layer (Cho et al., 2014).

    Per step, with ``r``, ``u`` the reset and update gates:
    ``r = σ_r(x W_xr + h W_hr + b_r)``, ``u = σ_u(x W_xu + h W_hu + b_u)``,
    ``c = σ_c(x W_xc + r ⊙ (h W_hc) + b_c)``, ``h_new = (1 - u) ⊙ h + u ⊙ c``.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape ``(batch, time, features...)`` (trailing axes are
        flattened into the features).
    num_units : int
        Number of hidden units.
    resetgate, updategate, hidden_update : Gate
        Parameters and nonlinearities (``W_cell`` is not used).
    hid_init : initializer, array, expression or Layer
        Initial hidden state, as for :class:`LSTMLayer`.
    backwards, learn_init, gradient_steps, grad_clipping, unroll_scan, precompute_input,\
 mask_input, only_return_final
        As for :class:`CustomRecurrentLayer` (``grad_clipping`` clips the
        gradients of the step's input, of ``h W_h`` and of the hidden
        update's pre-activation).
    **kwargs
        Passed to :class:`MergeLayer` (``name``).

    Examples
    --------
    >>> l_gru = GRULayer((None, 4, 2), num_units=3, only_return_final=True)
    >>> l_gru.output_shape, [p.name for p in l_gru.get_params()][:2]
    ((None, 3), ['W_in_to_updategate', 'W_hid_to_updategate'])
    """

    def __init__(
        self,
        incoming: Incoming,
        num_units: int,
        resetgate: Gate = Gate(W_cell=None),
        updategate: Gate = Gate(W_cell=None),
        hidden_update: Gate = Gate(W_cell=None, nonlinearity=nonlinearities.tanh),
        hid_init: Layer | ParamSpec = init.Constant(0.0),
        backwards: bool = False,
        learn_init: bool = False,
        gradient_steps: int = -1,
        grad_clipping: float = 0,
        unroll_scan: bool = False,
        precompute_input: bool = True,
        mask_input: Layer | None = None,
        only_return_final: bool = False,
        **kwargs: Any,
    ) -> None:
        incomings = _incomings(self, incoming, mask_input, [("hid_init", hid_init)])
        super().__init__(incomings, **kwargs)
        self.num_units = num_units = _check_units(num_units, self.name)
        _store_loop_options(
            self,
            backwards,
            learn_init,
            gradient_steps,
            grad_clipping,
            unroll_scan,
            precompute_input,
            only_return_final,
        )
        num_inputs = int(np.prod(self.input_shapes[0][2:]))
        # Lasagne creates the update gate's parameters first
        for gate, gate_name, nl_name in (
            (updategate, "updategate", "updategate"),
            (resetgate, "resetgate", "resetgate"),
            (hidden_update, "hidden_update", "hid"),
        ):
            W_in, W_hid, b, nl = _add_gate_params(self, gate, gate_name, num_inputs, num_units)
            setattr(self, f"W_in_to_{gate_name}", W_in)
            setattr(self, f"W_hid_to_{gate_name}", W_hid)
            setattr(self, f"b_{gate_name}", b)
            setattr(self, f"nonlinearity_{nl_name}", nl)
        if isinstance(hid_init, Layer):
            self.hid_init = hid_init
        else:
            self.hid_init = self.add_param(
                hid_init,
                (1, num_units),
                name="hid_init",
                trainable=learn_init,
                regularizable=False,
            )

    def get_output_shape_for(self, input_shapes):
        input_shape = input_shapes[0]
        if self.only_return_final:
            return input_shape[0], self.num_units
        return input_shape[0], input_shape[1], self.num_units

    def get_output_for(self, inputs, **kwargs):
        """The hidden states for the inputs (and the mask / initial state, when layers)."""
        mask, hid_init = _optional_inputs(self, inputs, ["hid_init"])
        input = _sequence_input(inputs[0])
        # stacked in the order reset, update, hidden update (not the parameters' order)
        gates = ("resetgate", "updategate", "hidden_update")
        W_in_stacked = pt.concatenate([getattr(self, f"W_in_to_{g}") for g in gates], axis=1)
        W_hid_stacked = pt.concatenate([getattr(self, f"W_hid_to_{g}") for g in gates], axis=1)
        b_stacked = pt.concatenate([getattr(self, f"b_{g}") for g in gates], axis=0)
        if self.precompute_input:
            input = pt.dot(input, W_in_stacked) + b_stacked
        units = self.num_units
        clipping = self.grad_clipping

        def step(input_n, hid_previous, W_hid, *args):
            hid_input = pt.dot(hid_previous, W_hid)
            # clipped before the input projection when it is not precomputed, as in Lasagne
            input_n = _clip(input_n, clipping)
            hid_input = _clip(hid_input, clipping)
            if not self.precompute_input:
                W_in, b = args
                input_n = pt.dot(input_n, W_in) + b
            resetgate = self.nonlinearity_resetgate(
                _gate_slice(hid_input, 0, units) + _gate_slice(input_n, 0, units)
            )
            updategate = self.nonlinearity_updategate(
                _gate_slice(hid_input, 1, units) + _gate_slice(input_n, 1, units)
            )
            hidden_update = _gate_slice(input_n, 2, units) + resetgate * _gate_slice(
                hid_input, 2, units
            )
            hidden_update = self.nonlinearity_hid(_clip(hidden_update, clipping))
            hid = (1 - updategate) * hid_previous + updategate * hidden_update
            return [_match_state(hid, hid_previous)]

        if not isinstance(self.hid_init, Layer):
            hid_init = _initial_state(self.hid_init, input)
        hid_init = _with_state_shape(hid_init, (None, units))
        non_seqs = [W_hid_stacked]
        if not self.precompute_input:
            non_seqs += [W_in_stacked, b_stacked]
        sequences = [input]
        if mask is not None:
            sequences.append(_mask_sequence(mask, 2))
            step = _masked_step(step, 1)
        (hid_out,) = _run_loop(self, step, sequences, [hid_init], non_seqs)
        return _finish(self, hid_out)
