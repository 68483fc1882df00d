/* app.c: run a model built by `autoconfig build` on one input file.
 *
 *   autoconfig build model.onnx --out DIR
 *   cc app.c -IDIR DIR/libautoconfig_model.so -Wl,-rpath,DIR -o app
 *   ./app DIR/weights.bin input.bin output.bin INPUT_FLOATS OUTPUT_FLOATS
 *
 * Inputs and outputs are raw float32 files in the shapes of DIR/manifest.json. */
#include <stdio.h>
#include <stdlib.h>
#include "autoconfig_model.h"

int main(int argc, char **argv) {
    if (argc != 6) return 2;
    long n_in = atol(argv[4]), n_out = atol(argv[5]);
    float *x = malloc(n_in * sizeof *x), *y = malloc(n_out * sizeof *y);
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(x, sizeof *x, n_in, f) != (size_t)n_in) return 1;
    fclose(f);
    ac_model *m = ac_model_load(argv[1]);  /* NULL, with a message, on failure */
    if (!m) return 1;
    const float *inputs[] = {x};  /* manifest.json: names, shapes, order */
    float *outputs[] = {y};
    int status = ac_model_run(m, inputs, outputs);
    ac_model_free(m);
    f = fopen(argv[3], "wb");
    if (status || !f || fwrite(y, sizeof *y, n_out, f) != (size_t)n_out) return 1;
    fclose(f);
    return 0;
}
