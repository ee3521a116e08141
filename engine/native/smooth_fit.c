/* The engine part's optimiser (engine.SMOOTH) for one set of data at a time, in C.
 *
 * engine/native/__init__.py explains when it is used. It computes what
 * engine.optimiser.minimise computes with engine.problems.ProblemSet (quadratic estimator,
 * Gaussian kernel, no row masks) and a cosine schedule without early stop: per problem,
 * EPOCHS Adam steps on u = log a of the regularised objective
 *     -log_positive(MMD^2) [+ 0.5 log(max(V, 0) + 1e-8)] + lambda * sum_d a_d
 * with the gradient written out by hand. Every problem (set k, lambda l) is independent,
 * so a set's pair differences (D x P, tens of KB) stay in the core's cache for all its
 * epochs, where the tensor program streams the whole batch from memory twice per epoch.
 *
 * Shapes (row-major, contiguous): delta (K, D, P) with P = n/2*n + m/2*m + n*m (the
 * circulant pairs of X, of Y, then all X-Y pairs, see circulant_pairs in problems.py);
 * gamma (K, D); lambdas (K, L); u (K, L, D), the starting point in, the last iterate out;
 * loss (K, L), out: the last iterate's objective.
 */
#include <math.h>
#include <float.h>
#include <stdlib.h>

#pragma omp declare simd notinbranch
extern double expm1(double);

/* The calling convention's version: engine/native/__init__.py checks it at load and
 * rebuilds a library that another version of this file compiled. */
#define SMOOTH_FIT_ABI 2
int smooth_fit_abi(void) { return SMOOTH_FIT_ABI; }

#define MMD2_FLOOR 1e-5
#define VAR_CONSTANT 1e-8

static double finite_or_limit(double g) {
    /* torch.nan_to_num: NaN -> 0, +-inf -> the largest finite value */
    if (isnan(g)) return 0.0;
    if (isinf(g)) return g > 0 ? DBL_MAX : -DBL_MAX;
    return g;
}

/* The circulant pairs (i, i + s mod n), s = 1 .. n/2, of one sample (see circulant_pairs
 * in problems.py); the doubled slab of an even n counts half. */
static double slab_weight(long n, long s) { return (n % 2 == 0 && s == n / 2) ? 0.5 : 1.0; }

/* Row sums (n) of the symmetric matrix whose circulant pairs hold values (n/2 x n). */
static void circulant_row_sums(long n, const double *values, double *r) {
    for (long i = 0; i < n; i++) r[i] = 0.0;
    for (long s = 1; s <= n / 2; s++, values += n) {
        double w = slab_weight(n, s);
        for (long i = 0; i < n; i++) {
            long j = i + s < n ? i + s : i + s - n;
            double v = values[i] * w;
            r[i] += v;
            r[j] += v;
        }
    }
}

/* Row sums of k - 1 over the circulant pairs of X and of Y and over the X-Y block. */
static void row_sums(long n, long m, const double *k, double *rxx, double *ryy,
                     double *rxy, double *cxy) {
    circulant_row_sums(n, k, rxx);
    circulant_row_sums(m, k + (n / 2) * n, ryy);
    const double *p = k + (n / 2) * n + (m / 2) * m;
    for (long j = 0; j < m; j++) cxy[j] = 0.0;
    for (long i = 0; i < n; i++) {
        double a = 0.0;
        const double *row = p + i * m;
        for (long j = 0; j < m; j++) {
            a += row[j];
            cxy[j] += row[j];
        }
        rxy[i] = a;
    }
}

/* The objective of one problem from its row sums, and its gradient with respect to them
 * (g_* must hold n, m, n, m values). As engine.estimators.mmd2_and_variance_from_sums
 * (diagonals 0, no masks) and ProblemSet.loss without the penalty. */
static double data_term(long n, long m, int ratio, const double *rxx, const double *ryy,
                        const double *rxy, const double *cxy, double *g_rxx,
                        double *g_ryy, double *g_rxy, double *g_cxy, double *fx,
                        double *fy) {
    double sxx = 0, syy = 0, sxy = 0;
    for (long i = 0; i < n; i++) sxx += rxx[i], sxy += rxy[i];
    for (long j = 0; j < m; j++) syy += ryy[j];
    double dn = (double)n, dm = (double)m;
    double mmd2 = sxx / (dn * (dn - 1)) + syy / (dm * (dm - 1)) - 2 * sxy / (dn * dm);
    double value, g_mmd2;
    if (mmd2 > MMD2_FLOOR) {
        value = -log(mmd2);
        g_mmd2 = -1.0 / mmd2;
    } else {
        value = -(log(MMD2_FLOOR) + mmd2 / MMD2_FLOOR - 1);
        g_mmd2 = -1.0 / MMD2_FLOOR;
    }
    for (long i = 0; i < n; i++) {
        g_rxx[i] = g_mmd2 / (dn * (dn - 1));
        g_rxy[i] = -2 * g_mmd2 / (dn * dm);
    }
    for (long j = 0; j < m; j++) {
        g_ryy[j] = g_mmd2 / (dm * (dm - 1));
        g_cxy[j] = 0.0;
    }
    if (!ratio) return value;
    double var, g_var;
    if (n == m) { /* the paired variance */
        double sum_h = 0, sum_h2 = 0;
        for (long i = 0; i < n; i++) {
            fx[i] = rxx[i] + ryy[i] - rxy[i] - cxy[i];
            sum_h += fx[i];
            sum_h2 += fx[i] * fx[i];
        }
        var = 4 / (dn * dn * dn) * sum_h2 - 4 / (dn * dn * dn * dn) * sum_h * sum_h;
        g_var = var >= 0 ? 0.5 / (var + VAR_CONSTANT) : 0.0;
        value += 0.5 * log((var >= 0 ? var : 0) + VAR_CONSTANT);
        for (long i = 0; i < n; i++) {
            double g_h = g_var * (8 / (dn * dn * dn) * fx[i] - 8 / (dn * dn * dn * dn) * sum_h);
            g_rxx[i] += g_h;
            g_ryy[i] += g_h;
            g_rxy[i] -= g_h;
            g_cxy[i] -= g_h;
        }
        return value;
    }
    double mean_x = 0, mean_y = 0, var_x = 0, var_y = 0;
    for (long i = 0; i < n; i++) {
        fx[i] = rxx[i] / (dn - 1) - rxy[i] / dm;
        mean_x += fx[i];
    }
    for (long j = 0; j < m; j++) {
        fy[j] = ryy[j] / (dm - 1) - cxy[j] / dn;
        mean_y += fy[j];
    }
    mean_x /= dn;
    mean_y /= dm;
    for (long i = 0; i < n; i++) var_x += (fx[i] - mean_x) * (fx[i] - mean_x);
    for (long j = 0; j < m; j++) var_y += (fy[j] - mean_y) * (fy[j] - mean_y);
    var_x /= dn;
    var_y /= dm;
    var = 4 / dn * var_x + 4 / dm * var_y;
    g_var = var >= 0 ? 0.5 / (var + VAR_CONSTANT) : 0.0;
    value += 0.5 * log((var >= 0 ? var : 0) + VAR_CONSTANT);
    for (long i = 0; i < n; i++) {
        double g_f = g_var * 4 / dn * 2 / dn * (fx[i] - mean_x);
        g_rxx[i] += g_f / (dn - 1);
        g_rxy[i] -= g_f / dm;
    }
    for (long j = 0; j < m; j++) {
        double g_f = g_var * 4 / dm * 2 / dm * (fy[j] - mean_y);
        g_ryy[j] += g_f / (dm - 1);
        g_cxy[j] -= g_f / dn;
    }
    return value;
}

/* The adjoint of circulant_row_sums times d expm1(e)/de = k + 1: each pair's share of
 * its two rows' gradients g (n), from its values k - 1 (n/2 x n) into q. */
static void circulant_gradient(long n, const double *k, const double *g, double *q) {
    for (long s = 1; s <= n / 2; s++, q += n, k += n) {
        double w = slab_weight(n, s);
        for (long i = 0; i < n; i++) {
            long j = i + s < n ? i + s : i + s - n;
            double gi = (g[i] + g[j]) * w;
            q[i] = gi + gi * k[i];
        }
    }
}

/* d(objective)/d(exponent) of each pair: the pair's share of its two row sums' gradients
 * times d expm1(e)/de = k + 1. */
static void pair_gradient(long n, long m, const double *k, const double *g_rxx,
                          const double *g_ryy, const double *g_rxy, const double *g_cxy,
                          double *ge) {
    long pxx = (n / 2) * n, pyy = (m / 2) * m;
    circulant_gradient(n, k, g_rxx, ge);
    circulant_gradient(m, k + pxx, g_ryy, ge + pxx);
    const double *p = k + pxx + pyy;
    double *q = ge + pxx + pyy;
    for (long i = 0; i < n; i++) {
        for (long j = 0; j < m; j++) {
            double g = g_rxy[i] + g_cxy[j];
            q[i * m + j] = g + g * p[i * m + j];
        }
    }
}

/* k (P) = scale (D) @ delta (D x P), four rows per pass over k (a pass per row would
 * load and store k D times). */
static void exponents(long D, long P, const double *delta, const double *scale,
                      double *k) {
    for (long p = 0; p < P; p++) k[p] = 0.0;
    long d = 0;
    for (; d + 4 <= D; d += 4) {
        const double *r0 = delta + d * P, *r1 = r0 + P, *r2 = r1 + P, *r3 = r2 + P;
        const double s0 = scale[d], s1 = scale[d + 1], s2 = scale[d + 2], s3 = scale[d + 3];
        #pragma omp simd
        for (long p = 0; p < P; p++)
            k[p] += s0 * r0[p] + s1 * r1[p] + s2 * r2[p] + s3 * r3[p];
    }
    for (; d < D; d++) {
        const double *row = delta + d * P;
        const double sd = scale[d];
        #pragma omp simd
        for (long p = 0; p < P; p++) k[p] += sd * row[p];
    }
}

/* out (D) = delta (D x P) @ ge (P), four rows at a time: one running sum would wait on
 * its own additions (a chain of P / 4 vector additions per row); four are independent. */
static void pair_products(long D, long P, const double *delta, const double *ge,
                          double *out) {
    long d = 0;
    for (; d + 4 <= D; d += 4) {
        const double *r0 = delta + d * P, *r1 = r0 + P, *r2 = r1 + P, *r3 = r2 + P;
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        #pragma omp simd reduction(+:a0, a1, a2, a3)
        for (long p = 0; p < P; p++) {
            a0 += r0[p] * ge[p];
            a1 += r1[p] * ge[p];
            a2 += r2[p] * ge[p];
            a3 += r3[p] * ge[p];
        }
        out[d] = a0, out[d + 1] = a1, out[d + 2] = a2, out[d + 3] = a3;
    }
    for (; d < D; d++) {
        const double *row = delta + d * P;
        double a = 0.0;
        #pragma omp simd reduction(+:a)
        for (long p = 0; p < P; p++) a += row[p] * ge[p];
        out[d] = a;
    }
}

/* Returns 0, or -1 when its scratch memory could not be allocated. */
int smooth_minimise_f64(long K, long L, long D, long n, long m, const double *delta,
                        const double *gamma, const double *lambdas, double *u, double *loss,
                        long epochs, double lr, double beta1, double beta2, double eps,
                        int ratio) {
    long P = (n / 2) * n + (m / 2) * m + n * m;
    long rows = 2 * (n + m);
    double *buf = malloc(sizeof(double) * (2 * P + 4 * rows + 6 * D));
    if (!buf) return -1;
    double *k = buf, *ge = k + P;
    double *rxx = ge + P, *ryy = rxx + n, *rxy = ryy + m, *cxy = rxy + n;
    double *g_rxx = cxy + m, *g_ryy = g_rxx + n, *g_rxy = g_ryy + m, *g_cxy = g_rxy + n;
    double *fx = g_cxy + m, *fy = fx + rows;
    double *w = fy + rows, *scale = w + D, *grad = scale + D, *m1 = grad + D, *m2 = m1 + D;
    double *inv = m2 + D;
    for (long set = 0; set < K; set++) {
        const double *dk = delta + set * D * P;
        for (long d = 0; d < D; d++) {
            double gd = gamma[set * D + d];
            inv[d] = 1.0 / (gd * gd * (double)D);
        }
        for (long l = 0; l < L; l++) {
            double *uk = u + (set * L + l) * D;
            double lam = lambdas[set * L + l];
            for (long d = 0; d < D; d++) m1[d] = 0.0, m2[d] = 0.0;
            for (long epoch = 0; epoch <= epochs; epoch++) {
                double value = 0.0;
                for (long d = 0; d < D; d++) {
                    w[d] = exp(uk[d]);
                    scale[d] = -(w[d] * w[d] * inv[d]);
                    value += lam * fabs(w[d]);
                }
                exponents(D, P, dk, scale, k);
                #pragma omp simd
                for (long p = 0; p < P; p++) k[p] = expm1(k[p]);
                row_sums(n, m, k, rxx, ryy, rxy, cxy);
                value += data_term(n, m, ratio, rxx, ryy, rxy, cxy, g_rxx, g_ryy, g_rxy,
                                   g_cxy, fx, fy);
                if (epoch == epochs) { /* the last iterate's objective, no step */
                    loss[set * L + l] = value;
                    break;
                }
                pair_gradient(n, m, k, g_rxx, g_ryy, g_rxy, g_cxy, ge);
                double t = (double)(epoch + 1);
                double step = lr * 0.5 * (1 + cos(M_PI * (double)epoch / (double)epochs));
                double c1 = 1 - pow(beta1, t), c2 = 1 - pow(beta2, t);
                pair_products(D, P, dk, ge, grad);
                for (long d = 0; d < D; d++) {
                    /* exponent = -sum_d s_d delta_d, s_d = w_d^2 inv_d, w_d = exp(u_d) */
                    double g_w = -grad[d] * 2 * w[d] * inv[d] + (w[d] > 0 ? lam : 0.0);
                    double g = finite_or_limit(g_w * w[d]);
                    m1[d] += (1 - beta1) * (g - m1[d]);
                    m2[d] += (1 - beta2) * (g * g - m2[d]);
                    uk[d] -= step * (m1[d] / c1) / (sqrt(m2[d] / c2) + eps);
                }
            }
        }
    }
    free(buf);
    return 0;
}
