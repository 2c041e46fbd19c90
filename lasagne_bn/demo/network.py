"""The demo's network and the functions compiled from it, with Lasagne's recipe."""

from __future__ import annotations

N_CLASSES = 10
LEARNING_RATE = 0.003


def build_network(stat_storage: str = "inv_std"):
    """conv3x3(16)-bn-relu, maxpool, conv3x3(32)-bn-relu, maxpool, dense(64)-bn-relu, dense(10).

    Examples
    --------
    >>> from lasagne_bn.layers import count_params
    >>> count_params(build_network())
    14042
    """
    from lasagne_bn.layers import (
        Conv2DLayer,
        DenseLayer,
        InputLayer,
        MaxPool2DLayer,
        batch_norm,
    )
    from lasagne_bn.nonlinearities import softmax

    net = InputLayer((None, 1, 8, 8), name="input")
    net = Conv2DLayer(net, 16, 3, pad="same", name="conv1")
    net = batch_norm(net, stat_storage=stat_storage)
    net = MaxPool2DLayer(net, 2, name="pool1")
    net = Conv2DLayer(net, 32, 3, pad="same", name="conv2")
    net = batch_norm(net, stat_storage=stat_storage)
    net = MaxPool2DLayer(net, 2, name="pool2")
    net = batch_norm(DenseLayer(net, 64, name="fc"), stat_storage=stat_storage)
    return DenseLayer(net, N_CLASSES, nonlinearity=softmax, name="output")


def input_var(network):
    """The input variable of the network's (only) input layer."""
    from lasagne_bn.layers import get_all_layers

    return get_all_layers(network)[0].input_var


def compile_predict(network, mode):
    """A function from images to class probabilities, deterministic (running statistics)."""
    import numpy as np
    import pytensor

    from lasagne_bn.layers import get_output

    probs = get_output(network, deterministic=True)
    function = pytensor.function([input_var(network)], probs, mode=mode)
    # np.asarray: JAX returns its own arrays, and before it has finished computing them
    return lambda images: np.asarray(function(images))


def compile_train(network, mode):
    """One Adam step on a minibatch: ``train(images, labels) -> (loss, accuracy)``."""
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn import objectives, updates
    from lasagne_bn.layers import get_all_params, get_output

    targets = pt.ivector("targets")
    probs, bn_updates = get_output(network, return_updates=True)
    loss = objectives.aggregate(objectives.categorical_crossentropy(probs, targets))
    accuracy = objectives.aggregate(objectives.categorical_accuracy(probs, targets))
    params = get_all_params(network, trainable=True)
    step = updates.adam(loss, params, learning_rate=LEARNING_RATE)
    step.update(bn_updates)  # the running averages of mean and inv_std
    return pytensor.function(
        [input_var(network), targets], [loss, accuracy], updates=step, mode=mode
    )


class ExportedTraining:
    """Training through :func:`lasagne_bn.export.export`: the same network, Adam and loss.

    ``train(images, labels) -> (loss, accuracy)`` is one jitted JAX step on
    parameter and state dicts; :meth:`write_back` puts the trained values
    into the network for everything that follows (saving, other modes).
    """

    def __init__(self, network):
        import jax
        import jax.numpy as jnp
        import optax

        from lasagne_bn.export import export, train_step

        def loss_fn(probs, targets):
            picked = jnp.take_along_axis(probs, targets[:, None], axis=1)[:, 0]
            accuracy = jnp.mean(jnp.argmax(probs, axis=1) == targets)
            return -jnp.mean(jnp.log(picked)), accuracy

        self.model = export(network)
        optimizer = optax.adam(LEARNING_RATE)  # Lasagne's adam defaults are optax's
        self.step = train_step(self.model, loss_fn, optimizer, has_aux=True)
        self.params, self.state = self.model.params, self.model.state
        self.opt_state = optimizer.init(self.params)
        self._predict = jax.jit(lambda p, s, x: self.model.apply(p, s, x)[0])

    def train(self, images, labels):
        self.params, self.state, self.opt_state, loss, accuracy = self.step(
            self.params, self.state, self.opt_state, images, labels
        )
        return loss, accuracy

    def predict(self, images):
        import numpy as np

        return np.asarray(self._predict(self.params, self.state, images))

    def write_back(self) -> None:
        self.model.write_back(self.params, self.state)


def loss_and_accuracy(probs, targets) -> tuple[float, float]:
    """Mean categorical cross-entropy and accuracy of predicted probabilities."""
    import numpy as np

    picked = probs[np.arange(len(targets)), targets].astype(np.float64)
    loss = float(-np.mean(np.log(np.maximum(picked, 1e-30))))
    return loss, float(np.mean(np.argmax(probs, axis=1) == targets))
