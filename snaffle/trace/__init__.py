"""Reading trajectories back: `snaffle trace show|stats|labels|html` and `snaffle ab`, the same for every arm."""
