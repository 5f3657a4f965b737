//! rocklet-python (being written)
