"""Task sets as versioned TFDS datasets in ArrayRecord (``tasksets``: catalog and TensorFlow-free
reading through grain; ``tfds_builder``: building, needs the ``tfds`` extra). See
docs/experiments.md."""
