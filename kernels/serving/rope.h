// Rotary position embedding (Su et al.; Llama / Hugging Face "rotate half" convention):
// within each head, the pair (x_j, x_{j+d/2}) is rotated by pos·θ^(−2j/d).
#ifndef PARATUNE_KERNELS_SERVING_ROPE_H_
#define PARATUNE_KERNELS_SERVING_ROPE_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace paratune::kernels::serving {

/// In place on `rows` rows (stride ld) of `heads` heads of dim d starting at x; row r
/// sits at position positions[r].
inline void ApplyRope(float* x, int64_t ld, int64_t rows, const int64_t* positions, int64_t heads,
                      int64_t d, double theta) {
  const int64_t half = d / 2;
  std::vector<float> cs(half), sn(half);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle =
          static_cast<double>(positions[r]) * std::pow(theta, -2.0 * j / static_cast<double>(d));
      cs[j] = static_cast<float>(std::cos(angle));
      sn[j] = static_cast<float>(std::sin(angle));
    }
    for (int64_t hh = 0; hh < heads; ++hh) {
      float* v = x + r * ld + hh * d;
      for (int64_t j = 0; j < half; ++j) {
        const float a = v[j], b = v[j + half];
        v[j] = a * cs[j] - b * sn[j];
        v[j + half] = b * cs[j] + a * sn[j];
      }
    }
  }
}

}  // namespace paratune::kernels::serving

#endif  // PARATUNE_KERNELS_SERVING_ROPE_H_
