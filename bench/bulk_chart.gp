# The bulk UPDATE chart: each variant's median time over no trigger's, with
# HOT updates and without.  gnuplot -e "data='...'; out='...'" bench/bulk_chart.gp
# data: one line per variant: name, ratio with HOT, ratio without.
set terminal pngcairo size 900,480 font "sans,10" noenhanced
set output out
set title "Bulk UPDATE of 1,000,000 rows: time over the same UPDATE without a trigger (median, lower is better)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set yrange [0:*]
set grid ytics
set ylabel "ratio to no trigger"
set xtics rotate by -20 scale 0
set key top right
set arrow from graph 0, first 1.10 to graph 1, first 1.10 nohead dashtype 2 linecolor rgb "#aa0000"
set label "target 1.10" at graph 0.01, first 1.14 textcolor rgb "#aa0000"
plot data using 2:xtic(1) title "HOT updates (fillfactor 45)", '' using 3 title "no HOT (fillfactor 100)"
