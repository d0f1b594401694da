//! Lane runtime (spec EG, SB-10, SB-11).
