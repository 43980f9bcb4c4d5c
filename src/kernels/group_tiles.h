// The parallel loop of the grouped GEMMs (skinny_linear.h, avx512_linear.h): every weight tile
// of every row group is one work item, and one at::parallel_for covers them all, so a layer of
// small expert GEMMs wakes the threads once instead of once per expert.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

namespace furlong::kernels {

// Calls slab(g, f0, f1) for disjoint weight-row ranges covering [0, F) of each of `groups`
// groups; ranges start at multiples of tile_rows (so a kernel's tiles are those of one call
// over the group alone) and tasks hold at least 16 tiles.
template <class Slab>
void parallel_over_group_tiles(int64_t groups, int64_t F, int64_t tile_rows, const Slab& slab) {
  const int64_t tiles = (F + tile_rows - 1) / tile_rows;
  at::parallel_for(0, groups * tiles, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1;) {
      const int64_t g = i / tiles, t0 = i % tiles, t1 = std::min(tiles, t0 + (i1 - i));
      slab(g, t0 * tile_rows, std::min(F, t1 * tile_rows));
      i += t1 - t0;
    }
  });
}

}  // namespace furlong::kernels
